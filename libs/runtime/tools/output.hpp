// SPDX-License-Identifier: BSL-1.0
// courier-run's output forwarding across hosts: each locality's stdout and stderr come through
// pipes (from the agent) and leave as whole lines prefixed with its rank, "[3] ...", so that
// the lines of several localities never interleave mid-line.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace courier::run {

class output_forwarder {
public:
    /// The read ends of locality `rank`'s stdout and stderr pipes (taken over: closed here).
    void add(int rank, int out_fd, int err_fd);
    /// Forwards on a thread until every pipe is at end of file or stop() is called.
    void start();
    /// Forwards what is left for at most `grace_ms`, then stops.
    void stop(int grace_ms);
    ~output_forwarder();

private:
    struct stream {
        int fd;
        int rank;
        int to; // 1 or 2
        std::string partial;
    };
    void run();
    void emit(stream& s, bool flush_partial);

    std::vector<stream> streams_;
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::atomic<long long> stop_at_ms_{0};
};

} // namespace courier::run
