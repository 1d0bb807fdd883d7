// SPDX-License-Identifier: BSL-1.0
// osu_bw's pattern over a plain TCP socket pair on loopback, with no libfabric and no runtime:
// windows of 64 messages of one size, each window closed by a 4-byte reply, for each TCP
// congestion control named, interleaved in rounds. It shows what the kernel's TCP does with
// single messages of each size, which every transport over sockets inherits (libfabric's net,
// rxm, OpenMPI's tcp BTL).
//
// usage: socket_bw [--sizes=N,N,...] [--congestion=NAME,NAME,...] [--rounds=N] [--windows=N]
//   --congestion: TCP_CONGESTION for both sockets (e.g. cubic,bbr); "default" leaves the
//   host's (net.ipv4.tcp_congestion_control). Prints, per size, each one's median MB/s and its
//   median ratio to the first, paired within rounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void fail(char const* what) {
    std::fprintf(stderr, "socket_bw: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

/// All `n` bytes, sent or received (blocking socket).
void whole(int fd, char* p, std::size_t n, bool receive) {
    while (n != 0) {
        ssize_t r = receive ? ::recv(fd, p, n, 0) : ::send(fd, p, n, MSG_NOSIGNAL);
        if (r <= 0) {
            fail(receive ? "recv" : "send");
        }
        p += r;
        n -= static_cast<std::size_t>(r);
    }
}

void configure(int fd, std::string const& congestion) {
    int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        fail("TCP_NODELAY");
    }
    if (congestion != "default" && ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                                                static_cast<socklen_t>(congestion.size())) != 0) {
        fail(("TCP_CONGESTION " + congestion).c_str());
    }
}

/// MB/s of `windows` windows of 64 messages of `size` bytes (after 2 windows of warm-up) over
/// a fresh connection with `congestion`.
double measure(std::size_t size, int windows, std::string const& congestion) {
    constexpr int window = 64;
    int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) {
        fail("socket");
    }
    configure(ls, congestion); // accepted sockets inherit it
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::listen(ls, 1) != 0) {
        fail("listen");
    }
    std::vector<char> buf(size);
    pid_t child = ::fork();
    if (child < 0) {
        fail("fork");
    }
    if (child == 0) {
        int fd = ::accept(ls, nullptr, nullptr);
        if (fd < 0) {
            fail("accept");
        }
        configure(fd, congestion);
        for (int i = 0; i < windows + 2; ++i) {
            for (int m = 0; m < window; ++m) {
                whole(fd, buf.data(), size, true);
            }
            whole(fd, buf.data(), 4, false);
        }
        ::_exit(0);
    }
    ::close(ls);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        fail("socket");
    }
    configure(fd, congestion);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        fail("connect");
    }
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < windows + 2; ++i) {
        if (i == 2) {
            start = std::chrono::steady_clock::now();
        }
        for (int m = 0; m < window; ++m) {
            whole(fd, buf.data(), size, false);
        }
        whole(fd, buf.data(), 4, true);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ::close(fd);
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "socket_bw: the receiving process failed\n");
        std::exit(1);
    }
    return static_cast<double>(size) * window * windows / s / 1e6;
}

std::vector<std::string> split(std::string_view list) {
    std::vector<std::string> out;
    while (!list.empty()) {
        auto comma = list.find(',');
        out.emplace_back(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
    return out;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 != 0 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> sizes{"131072", "192512", "196608", "229376", "262144"};
    std::vector<std::string> ccs{"cubic", "bbr"};
    int rounds = 5, windows = 200;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        auto value = [&](std::string_view name) {
            return a.substr(0, name.size()) == name ? a.substr(name.size()) : std::string_view{};
        };
        if (auto list = value("--sizes="); !list.empty()) {
            sizes = split(list);
        } else if (auto names = value("--congestion="); !names.empty()) {
            ccs = split(names);
        } else if (auto n = value("--rounds="); !n.empty()) {
            rounds = std::max(1, std::atoi(std::string(n).c_str()));
        } else if (auto w = value("--windows="); !w.empty()) {
            windows = std::max(1, std::atoi(std::string(w).c_str()));
        } else {
            std::fprintf(stderr, "socket_bw: unknown argument %s (see the usage at the top)\n",
                         argv[i]);
            return 2;
        }
    }
    std::printf("socket_bw: MB/s, median of %d rounds | median of the paired ratios to %s\n",
                rounds, ccs.front().c_str());
    for (auto const& size_text : sizes) {
        std::size_t size = std::strtoull(size_text.c_str(), nullptr, 10);
        if (size == 0) {
            std::fprintf(stderr, "socket_bw: bad size %s\n", size_text.c_str());
            return 2;
        }
        std::vector<std::vector<double>> rate(ccs.size()), ratio(ccs.size());
        for (int r = 0; r < rounds; ++r) {
            std::vector<double> here(ccs.size());
            for (std::size_t k = 0; k < ccs.size(); ++k) {
                // Every other round in reverse: neither runs always first.
                std::size_t c = r % 2 == 0 ? k : ccs.size() - 1 - k;
                here[c] = measure(size, windows, ccs[c]);
            }
            for (std::size_t c = 0; c < ccs.size(); ++c) {
                rate[c].push_back(here[c]);
                ratio[c].push_back(here[c] / here[0]);
            }
        }
        for (std::size_t c = 0; c < ccs.size(); ++c) {
            std::printf("%9zu %8s %10.0f", size, ccs[c].c_str(), median(rate[c]));
            if (c != 0) {
                std::printf(" | %.3f", median(ratio[c]));
            }
            std::printf("\n");
        }
    }
    return 0;
}
