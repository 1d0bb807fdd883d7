// SPDX-License-Identifier: BSL-1.0
#include "output.hpp"

#include <courier/common/fd_io.hpp>

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace courier::run {

namespace {
long long now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
} // namespace

void output_forwarder::add(int rank, int out_fd, int err_fd) {
    streams_.push_back({out_fd, rank, 1, {}});
    streams_.push_back({err_fd, rank, 2, {}});
}

void output_forwarder::start() {
    thread_ = std::thread([this] { run(); });
}

void output_forwarder::stop(int grace_ms) {
    stop_at_ms_.store(now_ms() + grace_ms);
    stopping_.store(true);
    if (thread_.joinable()) {
        thread_.join();
    }
}

output_forwarder::~output_forwarder() {
    stop(0);
    for (auto& s : streams_) {
        if (s.fd >= 0) {
            ::close(s.fd);
        }
    }
}

void output_forwarder::emit(stream& s, bool flush_partial) {
    std::string out;
    std::size_t start = 0, nl;
    while ((nl = s.partial.find('\n', start)) != std::string::npos) {
        out += "[" + std::to_string(s.rank) + "] " + s.partial.substr(start, nl + 1 - start);
        start = nl + 1;
    }
    s.partial.erase(0, start);
    if (flush_partial && !s.partial.empty()) {
        out += "[" + std::to_string(s.rank) + "] " + s.partial + "\n";
        s.partial.clear();
    }
    (void)io::write_all(s.to, out.data(), out.size()); // the launcher's own output gone: lost
}

void output_forwarder::run() {
    std::vector<pollfd> fds;
    for (;;) {
        fds.clear();
        for (auto& s : streams_) {
            if (s.fd >= 0) {
                fds.push_back({s.fd, POLLIN, 0});
            }
        }
        if (fds.empty() || (stopping_.load() && now_ms() >= stop_at_ms_.load())) {
            break;
        }
        int r = ::poll(fds.data(), fds.size(), 50);
        if (r <= 0) {
            continue;
        }
        for (auto& p : fds) {
            if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
                continue;
            }
            for (auto& s : streams_) {
                if (s.fd != p.fd) {
                    continue;
                }
                char buf[65536];
                ssize_t got = ::read(s.fd, buf, sizeof buf);
                if (got > 0) {
                    s.partial.append(buf, static_cast<std::size_t>(got));
                    // A line longer than the buffer goes out in pieces rather than growing.
                    emit(s, s.partial.size() > sizeof buf);
                } else if (got == 0 || errno != EINTR) {
                    emit(s, true);
                    ::close(s.fd);
                    s.fd = -1;
                }
            }
        }
    }
    for (auto& s : streams_) {
        emit(s, true);
    }
}

} // namespace courier::run
