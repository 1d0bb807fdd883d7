// SPDX-License-Identifier: BSL-1.0
// init / finalize: options, the scheduler's lifetime, the main task, quiescence at shutdown.
#include "bootstrap.hpp"
#include "distributed.hpp"
#include "flow_control.hpp"
#include "log.hpp"
#include "options.hpp"
#include "scheduler.hpp"
#include "topology.hpp"
#include "trace.hpp"
#include "traffic.hpp"
#include "transport_watch.hpp"

#include <malloc.h>

#include <courier/parcelport/mpi.hpp>
#include <courier/rma/pool.hpp>
#include <courier/runtime/actions.hpp>
#include <courier/runtime/async.hpp>
#include <courier/runtime/init.hpp>
#include <courier/runtime/this_thread.hpp>
#include <courier/serialization/chunk.hpp>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

namespace courier {

namespace {
std::atomic<bool> g_finalized{false};
std::atomic<std::uint64_t> g_unhandled{0};
detail::config g_config;
std::mutex g_config_mutex;
/// This process's locality as far as it is known outside a published locality state: from the
/// launcher's environment at init's start, then from the bootstrap (-1: none, a lone process).
std::atomic<std::int64_t> g_process_rank{-1};
/// Between the start of the runtime's threads and their end in init: exit() must not run the
/// static destructors under them (end_at_exit).
std::atomic<bool> g_running{false};
std::atomic<bool> g_distributed{false};

// exit() while the runtime runs (an action or courier_main calling std::exit): the static
// destructors would run under the workers, the launcher's monitor and the liveness thread, and
// destroy what they use (a condition variable one of them waits on: the exit never ended). The
// process ends at once instead, with exit()'s status, after removing its shared-memory files
// (no destructor closes its transport); courier-run and the peers take this for the
// locality's failure (it never finished the job).
void end_at_exit(int status, void*) {
    if (!g_running.load()) {
        return;
    }
    if (g_distributed.load()) {
        detail::log(detail::log_level::error,
                    "exit({}) called while locality {} ran (before courier::init returned): the "
                    "locality ends at once, without its part of the job's shutdown",
                    status, get_locality_id());
    }
    // Its threads leave their transport calls first: a lock one of them holds in a peer's
    // shared memory would otherwise stay taken, and every sender to that peer spin for ever.
    detail::transport_watch::close(std::chrono::seconds(1));
    parcelport::remove_shared_memory_files(); // no destructor will
    std::fflush(nullptr);
    std::_Exit(status);
}
} // namespace

namespace detail {
/// Where a log line comes from: "L<locality> w<worker>" ("w-1": not a worker thread).
std::string log_prefix() {
    std::int64_t rank = get_locality_id();
    if (std::int64_t known = g_process_rank.load(std::memory_order_relaxed);
        known >= 0 && !in_a_locality_state()) {
        rank = known; // before the job was joined or after it was left
    }
    return fmt::format("L{} w{}", rank, this_thread::get_worker_id());
}

namespace {
/// The lines of failed posted actions and tasks, at most 10 in 10 s: a loop of failing posts
/// (a bug, or a peer's flood) must not flood the log; they are all counted (g_unhandled) and
/// the count is written at the end.
logging::rate_limit g_failure_lines;
} // namespace

void report_unhandled_exception(std::exception_ptr e) noexcept {
    g_unhandled.fetch_add(1, std::memory_order_relaxed);
    try {
        std::rethrow_exception(e);
    } catch (std::exception const& x) {
        logging::error_limited(g_failure_lines,
                               "unhandled exception in a posted task on locality {}: {}",
                               get_locality_id(), x.what());
    } catch (...) {
        logging::error_limited(
            g_failure_lines, "unhandled exception of unknown type in a posted task on locality {}",
            get_locality_id());
    }
}

void report_posted_action_failure(char const* action, std::uint32_t source, std::string const& type,
                                  std::string const& what) noexcept {
    g_unhandled.fetch_add(1, std::memory_order_relaxed);
    logging::error_limited(g_failure_lines,
                           "posted action {} (sent by locality {}) failed on locality {}: {}: {}",
                           action, source, get_locality_id(), type, what);
}
} // namespace detail

namespace {
/// --courier:trace's PATH: empty (no trace), or a file name whose directory exists (checked at
/// start, not found missing at shutdown).
std::string trace_path_from(detail::config const& cfg) {
    std::string const& path = cfg.get("trace");
    if (path.empty()) {
        return path;
    }
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
        throw detail::config_error("--courier:trace=" + path + ": directory '" + dir.string() +
                                   "' does not exist");
    }
    if (std::filesystem::path(path).filename().empty()) {
        throw detail::config_error("--courier:trace=" + path + ": expected a file name");
    }
    return path;
}

// Waits until every spawned task has finished. A task that can never be resumed (all workers
// asleep, nothing queued or timed, no progress hook that could bring news) is a deadlock:
// reported, and false returned, instead of hanging.
bool wait_for_quiescence(detail::scheduler& s) {
    using namespace detail;
    auto idle_since = std::chrono::steady_clock::time_point{};
    for (;;) {
        std::int64_t live = s.live_tasks();
        if (live == 0) {
            return true;
        }
        if (s.all_idle() && !s.has_hooks()) {
            auto now = std::chrono::steady_clock::now();
            if (idle_since == decltype(idle_since){}) {
                idle_since = now;
            } else if (now - idle_since > std::chrono::milliseconds(500)) {
                log(log_level::error,
                    "{} task(s) are suspended and nothing can wake them (deadlock at shutdown)",
                    live);
                return false;
            }
        } else {
            idle_since = {};
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

/// --courier:malloc_retain: glibc's allocator keeps freed memory (options.cpp says why).
/// A threshold the user set in the environment is left alone.
void retain_freed_memory() {
#if defined(__GLIBC__)
    char const* tunables = std::getenv("GLIBC_TUNABLES");
    auto user_set = [&](char const* env, char const* tunable) {
        return std::getenv(env) != nullptr ||
               (tunables != nullptr && std::strstr(tunables, tunable) != nullptr);
    };
    if (!user_set("MALLOC_TRIM_THRESHOLD_", "malloc.trim_threshold")) {
        ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
    }
    if (!user_set("MALLOC_MMAP_THRESHOLD_", "malloc.mmap_threshold")) {
        ::mallopt(M_MMAP_THRESHOLD, 32 << 20); // glibc's largest on 64-bit hosts
    }
#endif
}

} // namespace

int init(std::function<int(int, char**)> courier_main, int argc, char** argv) {
    using namespace detail;
    if (current_scheduler() != nullptr) {
        throw std::logic_error("courier::init: the runtime is already running");
    }
    config cfg;
    scheduler_options so;
    std::string trace_path;
    std::uint64_t trace_events = 0;
    bool print = false;
    std::unique_ptr<bootstrap> boot;
    auto launcher_rank = rank_from_environment();
    g_process_rank.store(launcher_rank ? static_cast<std::int64_t>(*launcher_rank) : -1);
    courier::logging::set_prefix_provider(&log_prefix); // config errors name the locality too
    try {
        cfg = parse_config(argc, argv);
        if (cfg.help) {
            // Once per job, and the launcher is told this locality has nothing to run.
            if (launcher_rank.value_or(0) == 0) {
                std::fputs(help_text().c_str(), stdout);
                std::fflush(stdout);
            }
            decline_to_join();
            return 0;
        }
        log_level level;
        if (!courier::logging::parse_level(cfg.get("log"), level)) {
            throw config_error("--courier:log=" + cfg.get("log") +
                               ": expected error, warn, info or debug");
        }
        courier::logging::set_level(level);
        try {
            // The launcher's (null: one locality).
            boot = make_bootstrap_from_environment(
                cfg.get_choice("parcelport", {"libfabric", "mpi"}),
                cfg.get_choice("mpi_threads", {"serialized", "multiple"}) == "multiple");
        } catch (std::exception const& e) {
            log(log_level::error, "cannot join the job: {}", e.what());
            return 1;
        }
        if (boot) {
            g_process_rank.store(boot->rank());
        }
        // The localities a launcher starts on one host share its cores: by default each gets
        // cores/N workers, pinned to its own consecutive cores (as mpirun --bind-to core).
        std::size_t local_rank = 0, local_size = 1;
        if (boot) {
            local_rank = boot->where().local_rank;
            local_size = std::max<std::uint32_t>(1, boot->where().local_size);
        }
        void* topo = load_topology();
        std::size_t cores = available_cores(topo);
        free_topology(topo);
        if (cfg.get("threads") == "cores") {
            so.threads = std::max<std::size_t>(1, cores / local_size);
        } else {
            so.threads = static_cast<std::size_t>(cfg.get_int("threads", 1, 1024));
        }
        so.first_core = local_rank * so.threads % cores;
        so.oversubscribed = so.threads * local_size > cores;
        so.stack_size = static_cast<std::size_t>(cfg.get_bytes("stack_size", 16384, 1ll << 30));
        std::string const& bind = cfg.get_choice("bind", {"auto", "cores", "none"});
        // Oversubscribed, a pinned worker that polls keeps the worker of another locality
        // pinned to the same core from running, and the OS cannot move either (round trips
        // measured slower pinned; benchmarks/RESULTS.md). OpenMPI does not bind when
        // oversubscribed either.
        so.bind = bind == "cores" || (bind == "auto" && !so.oversubscribed);
        // What distributed_start will read: a bad value is an error in a single-process run
        // as well, not ignored.
        placement const* where = boot ? &boot->where() : nullptr;
        (void)transport_options_from(cfg, so.threads, where);
        std::chrono::milliseconds peer_timeout;
        bool exit_on_failure = true;
        liveness_options_from(cfg, peer_timeout, exit_on_failure);
        (void)cfg.get_choice("posted_errors", {"fail", "log"});
        (void)flow_window_from(cfg, 1);
        print = cfg.get_int("print_counters", 0, 1) != 0;
        trace_path = trace_path_from(cfg);
        trace_events = static_cast<std::uint64_t>(cfg.get_int("trace_events", 0, 1ll << 40));
        so.idle_spin = std::chrono::microseconds(cfg.get_int("idle_spin_us", 0, 10'000'000));
        so.collective_spin =
            std::chrono::microseconds(cfg.get_int("collective_spin_us", 0, 10'000'000));
        if (cfg.get_int("malloc_retain", 0, 1) == 1) {
            retain_freed_memory();
        }
        std::size_t const zc = zero_copy_threshold_from(cfg, where);
        auto deep = cfg.get_bytes("deep_array_threshold", 0, 1ll << 40);
        set_parcel_options({zc == 0 ? std::size_t{4096} : zc, zc != 0,
                            serialization::pointer_tracking::pointer_map,
                            static_cast<std::size_t>(deep)});
        rma::pool_options po;
        po.block_size = static_cast<std::size_t>(cfg.get_bytes("rma_pool_block", 1, 1ll << 30));
        po.limit = static_cast<std::size_t>(cfg.get_bytes("rma_pool_limit", 0, 1ll << 50));
        std::string const& numa = cfg.get_choice("rma_numa", {"local", "none"});
        po.numa_local = numa == "local";
        po.shared = cfg.get_int("rma_pool_shared", 0, 1) != 0;
        try {
            rma::configure(po);
        } catch (std::invalid_argument const& e) {
            throw config_error(e.what());
        }
    } catch (config_error const& e) {
        log(log_level::error, "{}", e.what());
        return 1;
    }
    {
        std::lock_guard g(g_config_mutex);
        g_config = cfg;
    }
    g_finalized.store(false);
    g_unhandled.store(0);

    auto s = std::make_unique<scheduler>(so);
    // Published before the workers start; taken back once every thread that records is gone.
    std::unique_ptr<trace::recorder> tracer;
    if (!trace_path.empty()) {
        tracer = std::make_unique<trace::recorder>(*s, trace_events);
        trace::g_active.store(tracer.get(), std::memory_order_release);
    }
    set_current_scheduler(s.get());
    // exit() from an action that runs while the job is still being joined (a peer already up
    // sends one while this process maps its peers' memory in distributed_start) must end the
    // process the same way: registered before the workers start, this handler covers that
    // window; the one registered below runs first once it exists (exit runs handlers in
    // reverse order; the first _Exits). Without it such an exit ran the static destructors
    // under the workers and left this locality's shared-memory files behind.
    static bool const early_exit_handler = ::on_exit(end_at_exit, nullptr) == 0;
    (void)early_exit_handler;
    g_running.store(true);
    s->start();
    bool distributed = false;
    try {
        distributed = boot && distributed_start(cfg, *s, std::move(boot));
    } catch (std::exception const& e) {
        log(log_level::error, "cannot join the job: {}", e.what());
        s->stop();
        set_current_scheduler(nullptr);
        trace::g_active.store(nullptr, std::memory_order_release);
        g_running.store(false);
        return 1;
    }
    std::uint32_t const rank = get_locality_id();
    g_distributed.store(distributed);
    // Registered once the runtime is up, so that it runs before the destructors of the
    // function-local statics the start constructed (exit runs handlers in reverse order).
    static bool const exit_handler = ::on_exit(end_at_exit, nullptr) == 0;
    (void)exit_handler;
    log(log_level::info, "started {} workers, {} KiB stacks, bind={} (first core {})", so.threads,
        so.stack_size / 1024, so.bind ? "cores" : "none", so.first_core);

    int rc = 0;
    bool spmd = cfg.get("spmd") != "0";
    bool runs_main = spmd || get_locality_id() == 0;
    if (runs_main) {
        std::mutex m;
        std::condition_variable cv;
        bool done = false;
        auto args = cfg.rest;
        spawn(make_task([&] {
            int r = 1;
            try {
                r = courier_main(static_cast<int>(args.size() - 1), args.data());
            } catch (std::exception const& e) {
                log(log_level::error, "courier_main threw: {}", e.what());
            } catch (...) {
                log(log_level::error, "courier_main threw an exception of unknown type");
            }
            std::lock_guard g(m);
            rc = r;
            done = true;
            cv.notify_all();
        }));
        std::unique_lock g(m);
        cv.wait(g, [&] { return done; });
    }
    if (distributed && get_locality_id() != 0) {
        distributed_wait_for_exit();
    }
    if (!wait_for_quiescence(*s)) {
        rc = rc == 0 ? 1 : rc;
    }
    if (distributed) {
        if (get_locality_id() == 0) { // in SPMD mode every locality ran courier_main
            try {
                distributed_shutdown_all();
            } catch (std::exception const& e) {
                log(log_level::error, "shutting the job down failed: {}", e.what());
                rc = rc == 0 ? 1 : rc;
            }
            wait_for_quiescence(*s);
        }
        distributed_stop();
        if (distributed_failed()) {
            rc = rc == 0 ? 1 : rc;
            parcelport::mpi_skip_finalize(); // it would wait for the failed peer (MPI only)
        }
    }
    s->stop();
    if (print) {
        print_counters(*s); // before the transport closes: its statistics are in them
    }
    set_current_scheduler(nullptr);
    if (distributed) {
        distributed_close();
    }
    if (tracer) {
        trace::g_active.store(nullptr, std::memory_order_release);
        std::string file = trace::file_for_locality(trace_path, rank);
        if (!tracer->write(file, rank)) {
            log(log_level::error, "cannot write the trace to {}: {}", file, std::strerror(errno));
            rc = rc == 0 ? 1 : rc;
        } else if (tracer->dropped() != 0) {
            log(log_level::warn,
                "the trace in {} is missing {} events past its limit of {} "
                "(--courier:trace_events)",
                file, tracer->dropped(), tracer->limit());
        }
        tracer.reset();
    }
    clear_components();
    s.reset();
    g_running.store(false);
    g_distributed.store(false);

    if (runs_main && !g_finalized.load()) {
        log(log_level::error, "courier_main returned without calling courier::finalize()");
        rc = rc == 0 ? 1 : rc;
    }
    if (std::uint64_t failed = g_unhandled.load(); failed != 0) {
        if (cfg.get("posted_errors") == "fail") {
            log(log_level::error,
                "{} posted action(s) or task(s) failed here: this locality's status is not 0 "
                "(--courier:posted_errors=log only logs them)",
                failed);
            rc = rc == 0 ? 1 : rc;
        } else {
            log(log_level::warn,
                "{} posted action(s) or task(s) failed here (logged only: "
                "--courier:posted_errors=log)",
                failed);
        }
    }
    return rc;
}

int finalize() {
    g_finalized.store(true);
    return 0;
}

std::size_t get_os_thread_count() {
    auto* s = detail::current_scheduler();
    return s != nullptr ? s->workers().size() : 0;
}

std::optional<std::string> get_config_entry(std::string const& name) {
    std::lock_guard g(g_config_mutex);
    auto it = g_config.values.find(name);
    if (it == g_config.values.end()) {
        return std::nullopt;
    }
    return it->second;
}

std::size_t register_progress_hook(std::function<bool()> poll, int wait_fd,
                                   std::function<bool()> can_sleep) {
    auto* s = detail::current_scheduler();
    if (s == nullptr) {
        throw std::logic_error("courier::register_progress_hook: the runtime is not running");
    }
    return s->register_hook(std::move(poll), wait_fd, std::move(can_sleep));
}

void unregister_progress_hook(std::size_t id) {
    if (auto* s = detail::current_scheduler()) {
        s->unregister_hook(id);
    }
}

void notify_work() noexcept {
    if (auto* s = detail::current_scheduler()) {
        s->notify_one();
    }
}

} // namespace courier
