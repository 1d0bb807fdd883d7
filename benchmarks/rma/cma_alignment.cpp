// SPDX-License-Identifier: BSL-1.0
// What a cross-process read (process_vm_readv: shm's CMA and Courier's direct reads) costs when
// source and destination sit at different offsets within their cache lines, against the same
// offsets: why receive buffers land at the sender's offset (receive_buffer_pool). A child
// process holds the source; the parent reads it, the offset pairs interleaved in each round.
//   cma_alignment [--size=BYTES (4 MiB)] [--rounds=N (5)] [--reads=N (100)]
// Prints one RESULT line per pair (median µs per read over the rounds) and its ratio to the
// pair with equal offsets (0, 0).
#include "common/harness.hpp"

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct offsets {
    std::size_t src, dst;
};

} // namespace

int main(int argc, char** argv) {
    std::size_t size = std::size_t{4} << 20;
    int rounds = 5, reads = 100;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a.rfind("--size=", 0) == 0) {
            size = std::stoull(a.substr(7));
        } else if (a.rfind("--rounds=", 0) == 0) {
            rounds = std::stoi(a.substr(9));
        } else if (a.rfind("--reads=", 0) == 0) {
            reads = std::stoi(a.substr(8));
        } else {
            std::fprintf(stderr, "cma_alignment: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    std::size_t const slack = 4096;
    auto* src = static_cast<char*>(std::aligned_alloc(4096, size + slack));
    auto* dst = static_cast<char*>(std::aligned_alloc(4096, size + slack));
    if (src == nullptr || dst == nullptr) {
        std::fprintf(stderr, "cma_alignment: out of memory\n");
        return 1;
    }
    std::memset(src, 'a', size + slack);
    std::memset(dst, 0, size + slack);
    int hold[2];
    if (::pipe(hold) != 0) {
        std::perror("pipe");
        return 1;
    }
    pid_t child = ::fork();
    if (child == 0) { // keeps its copy of src mapped until the parent is done
        char c;
        ssize_t ignored = ::read(hold[0], &c, 1);
        (void)ignored;
        ::_exit(0);
    }
    std::vector<offsets> const pairs = {{0, 0}, {16, 16}, {16, 0}, {0, 16}, {40, 8}};
    std::vector<std::vector<double>> per_pair(pairs.size());
    int status = 0;
    for (int r = 0; r < rounds && status == 0; ++r) {
        for (std::size_t k = 0; k < pairs.size(); ++k) {
            iovec local{dst + pairs[k].dst, size}, remote{src + pairs[k].src, size};
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reads; ++i) {
                if (::process_vm_readv(child, &local, 1, &remote, 1, 0) !=
                    static_cast<ssize_t>(size)) {
                    std::perror("cma_alignment: process_vm_readv (ptrace restrictions?)");
                    status = 1;
                    break;
                }
            }
            per_pair[k].push_back(
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count() /
                reads);
        }
    }
    ssize_t ignored = ::write(hold[1], "x", 1);
    (void)ignored;
    ::waitpid(child, nullptr, 0);
    if (status != 0) {
        return status;
    }
    double const base = courier::bench::median(per_pair[0]);
    for (std::size_t k = 0; k < pairs.size(); ++k) {
        double m = courier::bench::median(per_pair[k]);
        std::printf("RESULT cma_alignment %zu src=%zu dst=%zu %.1f %.3f\n", size, pairs[k].src,
                    pairs[k].dst, m, m / base);
    }
    std::free(src);
    std::free(dst);
    return 0;
}
