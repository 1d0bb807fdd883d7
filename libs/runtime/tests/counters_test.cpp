// SPDX-License-Identifier: BSL-1.0
// Performance counters (get_counters) in one runtime and across the localities of an
// in-process job, --courier:print_counters' lines, and the trace recorder: its file name, its
// event limit, and a runtime's trace file with every worker's tasks.
#include "../src/in_process.hpp"
#include "../src/scheduler.hpp"
#include "../src/trace.hpp"
#include "runtime_fixture.hpp"

#include <courier/runtime.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace {

using counters = std::map<std::string, double>;

double sum_of(std::vector<double> const& v) {
    return std::accumulate(v.begin(), v.end(), 0.0);
}
int twice(int x) {
    return 2 * x;
}

} // namespace

COURIER_PLAIN_ACTION(sum_of, counters_test_sum_action);
COURIER_PLAIN_ACTION(twice, counters_test_twice_action);

namespace {

std::size_t count_of(std::string const& text, std::string const& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

std::string read_file(std::filesystem::path const& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A fresh directory for one test's files, removed afterwards.
struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        path = std::filesystem::temp_directory_path() /
               ("courier-counters-test-" + std::to_string(::getpid()));
        std::filesystem::create_directories(path);
    }
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

TEST(counters, a_lone_locality_counts_its_tasks_and_idles_between_them) {
    int rc = courier::testing::run_in_runtime(2, [] {
        counters before = courier::get_counters(courier::find_here());
        for (char const* name :
             {"/parcels/count/sent", "/parcels/count/received", "/parcels/bytes/sent",
              "/parcels/bytes/received", "/parcels/bytes/zero-copy", "/parcels/bytes/rma-read",
              "/parcels/count/sent-flat", "/parcels/count/received-flat",
              "/parcels/count/replies-flat", "/threads/count/executed", "/threads/idle-rate",
              "/rma/pool/bytes-in-use", "/rma/pool/bytes-registered", "/flow/count/waits",
              "/parcelport/count/rma-reads"}) {
            EXPECT_EQ(before.count(name), 1u) << name;
        }
        std::vector<courier::future<int>> fs;
        for (int i = 0; i < 200; ++i) {
            fs.push_back(courier::async([i] { return i; }));
        }
        for (auto& f : fs) {
            f.get();
        }
        courier::this_thread::sleep_for(std::chrono::milliseconds(20)); // the other worker idles
        counters after = courier::get_counters_async(courier::find_here()).get();
        EXPECT_GE(after["/threads/count/executed"] - before["/threads/count/executed"], 200);
        EXPECT_EQ(after["/threads/count/os-threads"], 2);
        EXPECT_GT(after["/threads/idle-rate"], 0);
        EXPECT_LE(after["/threads/idle-rate"], 1);
        EXPECT_GT(after["/threads/time/idle"], 0);
        EXPECT_GT(after["/runtime/uptime"], 0.02);
        EXPECT_EQ(after["/parcels/count/sent"], 0);        // alone: no parcel leaves
        EXPECT_EQ(after.count("/trace/count/events"), 0u); // not tracing
    });
    EXPECT_EQ(rc, 0);
}

TEST(counters, another_locality_counts_the_parcels_and_zero_copy_bytes_it_got) {
    courier::detail::in_process_job job({.localities = 2, .threads = 2});
    job.run_on(0, [] {
        auto one = courier::find_all_localities().at(1);
        counters b0 = courier::get_counters(courier::find_here());
        counters b1 = courier::get_counters(one);
        for (int i = 0; i < 50; ++i) {
            EXPECT_EQ(courier::async<counters_test_twice_action>(one, i).get(), 2 * i);
        }
        std::vector<double> big(1 << 17, 1.0); // 1 MiB: a pointer chunk
        EXPECT_EQ(courier::async<counters_test_sum_action>(one, big).get(), 1 << 17);
        counters a0 = courier::get_counters(courier::find_here());
        counters a1 = courier::get_counters(one);
        // The reads of b1 and a1 are parcels too: at least the calls' 51 each way.
        EXPECT_GE(a0["/parcels/count/sent"] - b0["/parcels/count/sent"], 51);
        EXPECT_GE(a0["/parcels/count/received"] - b0["/parcels/count/received"], 51);
        EXPECT_GE(a1["/parcels/count/received"] - b1["/parcels/count/received"], 51);
        EXPECT_GE(a1["/parcels/count/sent"] - b1["/parcels/count/sent"], 51);
        EXPECT_GE(a0["/parcels/bytes/zero-copy"] - b0["/parcels/bytes/zero-copy"], 1 << 20);
        EXPECT_GE(a1["/parcels/bytes/received"] - b1["/parcels/bytes/received"], 1 << 20);
        EXPECT_GE(a1["/threads/count/executed"] - b1["/threads/count/executed"], 51);
        EXPECT_EQ(a1["/parcels/bytes/zero-copy"], 0); // the replies are small
    });
}

TEST(counters, print_counters_writes_one_sorted_line_per_counter_at_shutdown) {
    ::testing::internal::CaptureStdout();
    int rc = courier::testing::run_in_runtime(1, [] { courier::async([] {}).get(); },
                                              {"--courier:print_counters"});
    std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(rc, 0);
    std::istringstream lines(out);
    std::vector<std::string> names;
    for (std::string line; std::getline(lines, line);) {
        ASSERT_EQ(line.rfind("locality#0 /", 0), 0u) << line;
        auto sp = line.find(' ', 11);
        ASSERT_NE(sp, std::string::npos) << line;
        names.push_back(line.substr(11, sp - 11));
        std::size_t used = 0;
        double v = std::stod(line.substr(sp + 1), &used);
        EXPECT_EQ(used, line.size() - sp - 1) << line;
        EXPECT_GE(v, 0) << line;
    }
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "/threads/count/executed"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "/threads/idle-rate"), names.end());
}

TEST(trace, file_names_get_the_locality_before_the_extension) {
    using courier::detail::trace::file_for_locality;
    EXPECT_EQ(file_for_locality("trace.json", 0), "trace.0.json");
    EXPECT_EQ(file_for_locality("out/run.trace.json", 12), "out/run.trace.12.json");
    EXPECT_EQ(file_for_locality("/tmp/trace", 3), "/tmp/trace.3");
    EXPECT_EQ(file_for_locality("dir.d/trace", 1), "dir.d/trace.1");
}

TEST(trace, a_recorder_keeps_at_most_its_limit_and_counts_the_rest) {
    using namespace courier::detail;
    scheduler s(scheduler_options{.threads = 2, .bind = false});
    trace::recorder r(s, 10);
    courier::serialization::message m;
    for (int i = 0; i < 25; ++i) { // from this thread, not a worker: the shared buffer
        r.parcel(i % 2 == 0, 1, m, 100, 0);
    }
    r.rma_read(1, 4096, std::chrono::steady_clock::now());
    EXPECT_EQ(r.events(), 10u);
    EXPECT_EQ(r.dropped(), 16u);
    scratch_dir dir;
    auto file = dir.path / "limit.json";
    ASSERT_TRUE(r.write(file.string(), 0));
    std::string text = read_file(file);
    EXPECT_EQ(count_of(text, "\"cat\":\"parcel\""), 10u);
    EXPECT_NE(text.find("\"dropped_events\":16"), std::string::npos);
    EXPECT_NE(text.find("\"event_limit\":10"), std::string::npos);
    EXPECT_EQ(count_of(text, "\"name\":\"thread_name\""), 3u); // two workers, other threads
}

TEST(trace, a_runtime_writes_every_workers_tasks_at_shutdown) {
    scratch_dir dir;
    std::string path = (dir.path / "tasks.json").string();
    int rc = courier::testing::run_in_runtime(
        4,
        [] {
            // Tasks on every worker, some of which suspend (wait for their child), while
            // another task reads the counters (the trace's counts among them).
            std::atomic<bool> done{false};
            auto reader = courier::async([&] {
                auto events = [] {
                    return courier::get_counters(courier::find_here())["/trace/count/events"];
                };
                while (!done.load()) {
                    events();
                    courier::this_thread::yield();
                }
                return events();
            });
            std::vector<courier::future<int>> fs;
            for (int i = 0; i < 400; ++i) {
                fs.push_back(courier::async([i] {
                    if (i % 4 == 0) {
                        return courier::async([i] { return i; }).get();
                    }
                    return i;
                }));
            }
            for (auto& f : fs) {
                f.get();
            }
            done.store(true);
            EXPECT_GT(reader.get(), 0);
            auto c = courier::get_counters(courier::find_here());
            EXPECT_GT(c["/trace/count/events"], 400);
            EXPECT_EQ(c["/trace/count/dropped"], 0);
        },
        {"--courier:trace=" + path});
    ASSERT_EQ(rc, 0);
    std::string text = read_file(dir.path / "tasks.0.json");
    ASSERT_FALSE(text.empty());
    EXPECT_GE(count_of(text, "\"name\":\"task\""), 500u);
    EXPECT_EQ(count_of(text, "\"name\":\"thread_name\""), 5u);
    EXPECT_NE(text.find("\"args\":{\"name\":\"locality 0\"}"), std::string::npos);
    EXPECT_NE(text.find("\"dropped_events\":0"), std::string::npos);
    EXPECT_EQ(text.rfind("}\n"), text.size() - 2); // complete
}

TEST(trace, a_trace_path_in_a_missing_directory_is_refused_at_start) {
    bool ran = false;
    int rc = courier::testing::run_in_runtime(
        1, [&] { ran = true; }, {"--courier:trace=/nonexistent-courier-dir/trace.json"});
    EXPECT_EQ(rc, 1);
    EXPECT_FALSE(ran);
}

} // namespace
