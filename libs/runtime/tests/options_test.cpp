// SPDX-License-Identifier: BSL-1.0
// --courier: options: unknown options, help, environment fallbacks, bad values.
#include "../src/bootstrap.hpp"
#include "../src/distributed.hpp"
#include "../src/options.hpp"
#include "runtime_fixture.hpp"

#include <courier/common/sanitizers.hpp>
#include <courier/serialization/save_load.hpp>

#include <courier/parcelport/transport.hpp>

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {
/// courier::init's status for a program "prog" with `args` whose main runs `body`, then ends.
int run_with(std::vector<std::string> args, std::function<void()> const& body) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    return courier::init(
        [&body](int, char**) {
            body();
            return courier::finalize();
        },
        static_cast<int>(argv.size()), argv.data());
}
int init_with(std::vector<std::string> args, bool* ran = nullptr) {
    return run_with(std::move(args), [ran] {
        if (ran != nullptr) {
            *ran = true;
        }
    });
}
/// The options of a program "prog" started with `args`.
courier::detail::config config_of(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    return courier::detail::parse_config(static_cast<int>(argv.size()), argv.data());
}
} // namespace

TEST(options, unknown_option_is_an_error_with_a_clear_message) {
    testing::internal::CaptureStderr();
    bool ran = false;
    EXPECT_EQ(init_with({"--courier:thraeds=2"}, &ran), 1);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(ran);
    EXPECT_NE(err.find("unknown option --courier:thraeds"), std::string::npos) << err;
}

TEST(options, help_lists_every_option_with_its_default) {
    testing::internal::CaptureStdout();
    bool ran = false;
    EXPECT_EQ(init_with({"--courier:help"}, &ran), 0);
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_FALSE(ran);
    for (char const* name : {"threads", "stack_size", "bind", "idle_spin_us", "collective_spin_us",
                             "log", "zero_copy_threshold"}) {
        EXPECT_NE(out.find(std::string("--courier:") + name), std::string::npos) << name;
    }
    EXPECT_NE(out.find("65536"), std::string::npos);
}

TEST(options, environment_fallback_and_command_line_precedence) {
    ::setenv("COURIER_THREADS", "2", 1);
    EXPECT_EQ(courier::testing::run_in_runtime(1,
                                               [] {
                                                   EXPECT_EQ(courier::get_os_thread_count(),
                                                             1u); // command line wins
                                               }),
              0);
    std::size_t seen = 0;
    std::vector<std::string> args = {"prog"};
    std::vector<char*> argv{args[0].data()};
    EXPECT_EQ(courier::init(
                  [&](int, char**) {
                      seen = courier::get_os_thread_count();
                      EXPECT_EQ(courier::get_config_entry("threads"), "2");
                      EXPECT_FALSE(courier::get_config_entry("nonsense").has_value());
                      return courier::finalize();
                  },
                  1, argv.data()),
              0);
    ::unsetenv("COURIER_THREADS");
    EXPECT_EQ(seen, 2u);
}

TEST(options, bad_values_are_rejected) {
    for (auto bad : {"--courier:threads=0",
                     "--courier:threads=two",
                     "--courier:bind=maybe",
                     "--courier:log=loud",
                     "--courier:stack_size=100",
                     "--courier:tcp_doorbell=maybe",
                     "--courier:rma_numa=far",
                     "--courier:shm_split=2",
                     "--courier:shm_doorbell=yes",
                     "--courier:read_budget=-1",
                     "--courier:read_piece=x",
                     "--courier:coalesce=3",
                     "--courier:coalesce_records=-1",
                     "--courier:coalesce_records=many",
                     "--courier:coalesce_in_flight=-1",
                     "--courier:coalesce_in_flight=two",
                     "--courier:eager_threshold=10",
                     "--courier:registration_cache=-5",
                     "--courier:peer_timeout=soon",
                     "--courier:peer_timeout=-1",
                     "--courier:on_peer_failure=abort",
                     "--courier:posted_errors=ignore",
                     "--courier:parcels_in_flight=many",
                     "--courier:bytes_in_flight=-1",
                     "--courier:total_parcels_in_flight=x",
                     "--courier:total_bytes_in_flight=-2",
                     "--courier:collective_spin_us=-1",
                     "--courier:collective_spin_us=soon"}) {
        testing::internal::CaptureStderr();
        EXPECT_EQ(init_with({bad}), 1) << bad;
        std::string err = testing::internal::GetCapturedStderr();
        EXPECT_NE(err.find("]: --courier:"), std::string::npos) << bad << ": " << err;
    }
}

TEST(options, a_bad_choice_names_the_values_it_accepts) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(init_with({"--courier:tcp_doorbell=maybe"}), 1);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("--courier:tcp_doorbell=maybe: expected auto, 0 or 1"), std::string::npos)
        << err;
}

TEST(options, the_zero_copy_threshold_defaults_by_provider) {
    // "auto": 64 KiB on tcp over net (the smallest block pushed whole), 96 KiB over rxm or
    // with push_max under 96 KiB (a rendezvous costs a read request's round trip there), 8 KiB
    // on shm (eager messages up to 8 KiB go as two parts within its inject size), 4 KiB
    // elsewhere; an explicit value wins, and a bad one is an error. They are the parcels':
    // save() without options keeps the documented 4 KiB (API.md), so a program's own 4 KiB
    // array is a pointer chunk whatever the provider.
    struct row {
        std::vector<std::string> args;
        std::size_t expect;
    };
    // "tcp" opens net where libfabric offers it, else rxm (which reads every large parcel).
    bool const tcp_pushes = courier::parcelport::tcp_provider() == "net";
    for (auto const& r : std::vector<row>{
             {{"--courier:provider=tcp"}, tcp_pushes ? 65536u : 98304u},
             {{"--courier:provider=tcp", "--courier:push_max=96K"}, tcp_pushes ? 65536u : 98304u},
             // Blocks of 64-96 KiB over push_max would be read, not pushed: eager as before.
             {{"--courier:provider=tcp", "--courier:push_max=64K"}, 98304},
             {{"--courier:provider=tcp", "--courier:push_max=0"}, 98304},
             {{"--courier:provider=tcp;ofi_rxm"}, 98304},
             {{"--courier:provider=shm"}, 8192},
             {{"--courier:provider=verbs"}, 4096},
             {{"--courier:provider=tcp", "--courier:zero_copy_threshold=2048"}, 2048}}) {
        std::size_t seen = 0, process_default = 0, pointer_chunks = 0;
        bool ran = false;
        EXPECT_EQ(run_with(r.args,
                           [&] {
                               ran = true;
                               seen = courier::detail::parcel_options().zero_copy_threshold;
                               process_default =
                                   courier::serialization::default_options().zero_copy_threshold;
                               std::vector<char> const block(4096, 'b');
                               auto m = courier::serialization::save(block);
                               pointer_chunks = m.external_chunk_count();
                           }),
                  0);
        EXPECT_TRUE(ran);
        EXPECT_EQ(seen, r.expect) << r.args.back();
        EXPECT_EQ(process_default, 4096u) << r.args.back();
        EXPECT_EQ(pointer_chunks, 1u) << r.args.back();
    }
    testing::internal::CaptureStderr();
    EXPECT_EQ(init_with({"--courier:zero_copy_threshold=big"}), 1);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("--courier:zero_copy_threshold=big"), std::string::npos) << err;
}

namespace {
// The CPUs the calling thread may run on.
int allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) {
        return -1;
    }
    return CPU_COUNT(&set);
}

// How many CPUs a task of a runtime started with `args` may run on.
int cpus_of_a_task(std::vector<std::string> args) {
    int seen = -2;
    EXPECT_EQ(run_with(std::move(args),
                       [&] { seen = courier::async([] { return allowed_cpus(); }).get(); }),
              0);
    return seen;
}
} // namespace

TEST(options, bind_auto_pins_workers_unless_they_oversubscribe_the_cores) {
    int const all = allowed_cpus();
    if (all < 2) {
        GTEST_SKIP() << "this process may run on " << all
                     << " CPU(s): pinned and unpinned workers look the same";
    }
    std::string const too_many = "--courier:threads=" + std::to_string(all + 1);
    // One worker per core or fewer: pinned (to one core's CPUs).
    EXPECT_LT(cpus_of_a_task({"--courier:threads=1"}), all);
    EXPECT_LT(cpus_of_a_task({"--courier:threads=1", "--courier:bind=auto"}), all);
    // More workers than cores: left to the OS.
    EXPECT_EQ(cpus_of_a_task({too_many}), all);
    // Explicit choices win.
    EXPECT_LT(cpus_of_a_task({too_many, "--courier:bind=cores"}), all);
    EXPECT_EQ(cpus_of_a_task({"--courier:threads=1", "--courier:bind=none"}), all);
}

// A task that frees the blocks at the top of its thread's heap and allocates them again (a
// collective's result vectors, freed by the caller, then the next call's): with
// --courier:malloc_retain (the default) the pages stay, so the allocations fault nothing in;
// with glibc's defaults each free of 128 KiB at the top hands them back to the kernel.
namespace {
[[maybe_unused]] long page_faults_of_allocate_free_cycles() {
    auto cycle = [] {
        std::size_t const n = 65536;
        std::unique_ptr<char[]> blocks[4]; // zero-filled: every page touched
        int sum = 0;
        for (auto& b : blocks) {
            b = std::make_unique<char[]>(n);
            sum += b[n - 1];
        }
        return sum;
    };
    for (int i = 0; i < 10; ++i) {
        (void)cycle();
    }
    rusage before{}, after{};
    ::getrusage(RUSAGE_THREAD, &before);
    for (int i = 0; i < 200; ++i) {
        (void)cycle();
    }
    ::getrusage(RUSAGE_THREAD, &after);
    return after.ru_minflt - before.ru_minflt;
}
} // namespace

TEST(options, malloc_retain_keeps_freed_memory_for_the_next_allocation) {
#if COURIER_ASAN || COURIER_TSAN
    GTEST_SKIP() << "the sanitizer's allocator replaces glibc's: mallopt does not apply";
#else
    long faults = -1;
    EXPECT_EQ(courier::testing::run_in_runtime(
                  1, [&] { faults = courier::async(page_faults_of_allocate_free_cycles).get(); }),
              0);
    // Up to 64 faults per cycle when the pages go back.
    EXPECT_LT(faults, 20) << "page faults in 200 allocate-free cycles of 4 x 64 KiB";
#endif
}

TEST(options, shm_outbox_chunk_auto_a_size_or_none) {
    // auto leaves the transport's default (default_shm_outbox_chunk: by processor); a size is
    // the limit; 0 stages nothing, which is no outbox at all.
    auto options_of = [](std::vector<std::string> args) {
        return courier::detail::transport_options_from(config_of(std::move(args)), 1, nullptr);
    };
    auto const defaults = options_of({"--courier:provider=shm"});
    EXPECT_EQ(defaults.shm_outbox_chunk, 0u);
    EXPECT_EQ(defaults.shm_outbox, std::size_t{8} << 20);
    auto const sized = options_of({"--courier:provider=shm", "--courier:shm_outbox_chunk=65536"});
    EXPECT_EQ(sized.shm_outbox_chunk, 65536u);
    EXPECT_EQ(sized.shm_outbox, std::size_t{8} << 20);
    auto const none = options_of({"--courier:provider=shm", "--courier:shm_outbox_chunk=0"});
    EXPECT_EQ(none.shm_outbox, 0u);
}

TEST(options, tcp_is_resolved_where_the_transport_opens_not_in_the_options) {
    // The options keep "tcp" whatever the workers, tcp_doorbell and network_doorbell say:
    // make_transport resolves it (tcp_provider(), net wherever offered; that it opens net with
    // the doorbell and with the wait fd alike is opening.tcp_opens_net_whether_a_doorbell_or_
    // the_wait_fd_wakes_it).
    namespace pp = courier::parcelport;
    std::string const net = pp::tcp_provider();
    ASSERT_TRUE(net == "net" || net == "tcp;ofi_rxm") << net;
    if (net != "net") {
        std::printf("libfabric offers no net provider here: tcp is tcp;ofi_rxm throughout\n");
    }
    auto options = [](std::vector<std::string> args, std::size_t workers,
                      courier::detail::placement const* where = nullptr) {
        return courier::detail::transport_options_from(config_of(std::move(args)), workers, where);
    };
    for (std::size_t workers : {1u, 2u}) {
        for (auto bell : {"auto", "0", "1"}) {
            auto const o = options(
                {"--courier:provider=tcp", std::string("--courier:tcp_doorbell=") + bell}, workers);
            EXPECT_EQ(o.provider, "tcp") << "resolved when the transport opens, not before";
        }
    }
    courier::detail::placement hosts;
    hosts.host_count = 2;
    hosts.local_size = 1;
    hosts.launcher_address = "198.18.0.1";
    auto const across = options(
        {"--courier:provider=tcp", "--courier:interface=lo", "--courier:network_doorbell=0"}, 2,
        &hosts);
    EXPECT_EQ(across.provider, "tcp");
    EXPECT_FALSE(across.network_doorbell);
}

TEST(options, sizes_take_binary_multiples) {
    // Sizes in bytes take K, M or G (and KiB, MiB, GiB, in either case); anything else, and a
    // multiple past the range or past what a long long holds, is an error naming the option.
    auto bytes = [](std::string value, long long max = 1LL << 40) {
        return config_of({"--courier:stack_size=" + value}).get_bytes("stack_size", 16384, max);
    };
    EXPECT_EQ(bytes("65536"), 65536);
    EXPECT_EQ(bytes("64K"), 65536);
    EXPECT_EQ(bytes("64k"), 65536);
    EXPECT_EQ(bytes("1M"), 1 << 20);
    EXPECT_EQ(bytes("1MiB"), 1 << 20);
    EXPECT_EQ(bytes("2gib"), 2LL << 30);
    auto refused = [&](std::string bad, long long max = 1LL << 40) {
        try {
            bytes(bad, max);
            ADD_FAILURE() << "accepted " << bad;
        } catch (courier::detail::config_error const& e) {
            EXPECT_NE(std::string(e.what()).find("--courier:stack_size=" + bad + ":"),
                      std::string::npos)
                << e.what();
        }
    };
    for (std::string bad :
         {"1.5M", "1Q", "M", "", "1 M", " 1K", "+1K", "1MB", "1KiBB", "-1K", "2048G"}) {
        refused(bad);
    }
    // (2^34 + 1) GiB is 2^64 + 2^30 bytes: a product that wrapped would read as 1 GiB, inside
    // the range; it must be refused as out of range.
    refused("17179869185G", std::numeric_limits<long long>::max());
    // The thresholds take them too ("auto" still means the provider's default).
    EXPECT_EQ(config_of({"--courier:zero_copy_threshold=16K"})
                  .get_threshold("zero_copy_threshold", 0, 1LL << 40, "tcp"),
              16384);
    // Counts stay plain integers: a suffix is not an integer.
    try {
        config_of({"--courier:threads=2K"}).get_int("threads", 1, 1024);
        ADD_FAILURE() << "accepted threads=2K";
    } catch (courier::detail::config_error const& e) {
        EXPECT_NE(std::string(e.what()).find("--courier:threads=2K: not an integer"),
                  std::string::npos)
            << e.what();
    }
}

namespace {
// Takes `n` levels of 1 KiB frames: every 64th byte of each frame's array is written before
// the call below it and read after, so the frames stay whole and the call is no tail call.
int deep(int n) {
    volatile char pad[1024];
    for (int i = 0; i < 1024; i += 64) {
        pad[i] = static_cast<char>(n + i);
    }
    int below = n == 0 ? 0 : deep(n - 1) + 1;
    int sum = 0;
    for (int i = 0; i < 1024; i += 64) {
        sum += pad[i] == static_cast<char>(n + i) ? 0 : 1;
    }
    return below + sum * 1000;
}
} // namespace

TEST(options, a_stack_size_in_mib_gives_courier_threads_that_much_stack) {
    // 256 levels of 1 KiB frames: four times the default 64 KiB stack of a Courier thread
    // (where they end in the stack-overflow report), within --courier:stack_size=1M.
    int depth = -1;
    EXPECT_EQ(run_with({"--courier:stack_size=1M", "--courier:threads=1"},
                       [&] { depth = courier::async([] { return deep(256); }).get(); }),
              0);
    EXPECT_EQ(depth, 256);
}
