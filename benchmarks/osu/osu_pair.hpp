// SPDX-License-Identifier: BSL-1.0
// What the two-process OSU programs without a launcher share (osu_fabric, osu_transport): one
// process forks the other, they exchange endpoint addresses over a socketpair, and each pins
// itself to its own core (rank 0 to core 0, rank 1 to core 1).
#pragma once

#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace osu {

/// Pins the calling process to `core` (modulo the cores online).
inline void pin(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core % std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)), &set);
    ::sched_setaffinity(0, sizeof set, &set);
}

/// Sends `mine` to the other process and returns what it sent (length-prefixed); exits the
/// process with status 1 if the socket fails.
template <class Byte>
std::vector<Byte> exchange(int sock, std::vector<Byte> const& mine, char const* prog) {
    auto io_all = [&](void* p, std::size_t n, bool write) {
        auto* c = static_cast<char*>(p);
        while (n > 0) {
            ssize_t r = write ? ::write(sock, c, n) : ::read(sock, c, n);
            if (r <= 0) {
                std::fprintf(stderr, "%s: address exchange failed\n", prog);
                std::exit(1);
            }
            c += r;
            n -= static_cast<std::size_t>(r);
        }
    };
    auto len = static_cast<std::uint32_t>(mine.size());
    io_all(&len, sizeof len, true);
    io_all(const_cast<Byte*>(mine.data()), len, true);
    io_all(&len, sizeof len, false);
    std::vector<Byte> theirs(len);
    io_all(theirs.data(), len, false);
    return theirs;
}

/// Forks the second process and runs `run(rank, socket)` in both (it returns the process's
/// exit status); returns main's status: 0 if both succeeded.
template <class Run>
int run_pair(Run&& run) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        std::perror("socketpair");
        return 1;
    }
    std::fflush(stdout);
    pid_t child = ::fork();
    if (child == 0) {
        ::close(sv[0]);
        ::_exit(run(1, sv[1]));
    }
    ::close(sv[1]);
    int rc = run(0, sv[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    return rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

} // namespace osu
