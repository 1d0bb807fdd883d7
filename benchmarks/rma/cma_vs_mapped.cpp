// SPDX-License-Identifier: BSL-1.0
// What a receiver on the same host pays to take a peer's chunk: a cross-process read
// (process_vm_readv: libfabric shm's CMA, Courier's direct reads, vader's single copy under the
// MPI parcelport) against a plain copy out of memory the peer shares with it (a memfd both map,
// as a registered pool in shared memory would be). A child process holds both sources and never
// writes them (as osu_bw's sender); the parent reads them into one destination, the two ways
// interleaved in each round (which goes first alternates), pinned to core 0 (the child to
// core 1). Both sources stay in the caches up to their size: a copy rate, not an application's.
//   cma_vs_mapped [--sizes=BYTES,...] [--rounds=N (5)] [--bytes=N (1 GiB read per case a round)]
// Prints one RESULT line per size and way (median GB/s over the rounds) and the ratio.
#include "common/harness.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set); // best effort: a single-core machine still runs
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::size_t> sizes = {65536, 262144, 1048576, 4194304};
    int rounds = 5;
    double bytes_per_case = double(std::size_t{1} << 30);
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        try {
            if (a.rfind("--sizes=", 0) == 0) {
                sizes.clear();
                for (std::size_t at = 8; at < a.size();) {
                    std::size_t comma = a.find(',', at);
                    sizes.push_back(std::stoull(a.substr(at, comma - at)));
                    at = comma == std::string::npos ? a.size() : comma + 1;
                }
            } else if (a.rfind("--rounds=", 0) == 0) {
                rounds = std::stoi(a.substr(9));
            } else if (a.rfind("--bytes=", 0) == 0) {
                bytes_per_case = std::stod(a.substr(8));
            } else {
                std::fprintf(stderr, "cma_vs_mapped: unknown argument %s\n", a.c_str());
                return 2;
            }
        } catch (std::exception const&) {
            std::fprintf(stderr, "cma_vs_mapped: %s: expected a number\n", a.c_str());
            return 2;
        }
    }
    if (sizes.empty() || rounds < 1 || bytes_per_case <= 0 ||
        std::find(sizes.begin(), sizes.end(), std::size_t{0}) != sizes.end()) {
        std::fprintf(stderr, "cma_vs_mapped: sizes, rounds and bytes must be positive\n");
        return 2;
    }
    std::size_t largest = 0;
    for (std::size_t s : sizes) {
        largest = std::max(largest, s);
    }
    int fd = ::memfd_create("cma_vs_mapped", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(largest)) != 0) {
        std::perror("cma_vs_mapped: memfd");
        return 1;
    }
    auto* shared =
        static_cast<char*>(::mmap(nullptr, largest, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    auto* own = static_cast<char*>(
        ::mmap(nullptr, largest, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto* dst = static_cast<char*>(std::aligned_alloc(4096, largest));
    if (shared == MAP_FAILED || own == MAP_FAILED || dst == nullptr) {
        std::fprintf(stderr, "cma_vs_mapped: out of memory\n");
        return 1;
    }
    std::memset(shared, 'a', largest);
    std::memset(own, 'a', largest);
    std::memset(dst, 0, largest);
    int hold[2];
    if (::pipe(hold) != 0) {
        std::perror("pipe");
        return 1;
    }
    pid_t child = ::fork();
    if (child < 0) {
        std::perror("cma_vs_mapped: fork");
        return 1;
    }
    if (child == 0) { // holds `own` (its private copy) until the parent is done, or gone
        ::close(hold[1]);
        pin(1);
        char c;
        ssize_t ignored = ::read(hold[0], &c, 1);
        (void)ignored;
        ::_exit(0);
    }
    ::close(hold[0]);
    pin(0);
    int status = 0;
    // [size][way]: GB/s per round; way 0 = process_vm_readv from the child, 1 = memcpy from the
    // shared mapping.
    std::vector<std::vector<std::vector<double>>> rate(sizes.size(),
                                                       std::vector<std::vector<double>>(2));
    for (int r = 0; r < rounds && status == 0; ++r) {
        for (std::size_t k = 0; k < sizes.size() && status == 0; ++k) {
            std::size_t const n = sizes[k];
            int const reads = std::max(1, static_cast<int>(bytes_per_case / double(n)));
            for (int w = 0; w < 2 && status == 0; ++w) {
                int const way = (w + r) % 2;
                auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < reads; ++i) {
                    if (way == 0) {
                        iovec local{dst, n}, remote{own, n};
                        if (::process_vm_readv(child, &local, 1, &remote, 1, 0) !=
                            static_cast<ssize_t>(n)) {
                            std::perror("cma_vs_mapped: process_vm_readv (ptrace restrictions?)");
                            status = 1;
                            break;
                        }
                    } else {
                        std::memcpy(dst, shared, n);
                        courier::bench::do_not_optimize(dst[n - 1]);
                    }
                }
                double s =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                rate[k][static_cast<std::size_t>(way)].push_back(double(n) * reads / s / 1e9);
            }
        }
    }
    ::close(hold[1]); // the child's read returns
    ::waitpid(child, nullptr, 0);
    if (status != 0) {
        return status;
    }
    for (std::size_t k = 0; k < sizes.size(); ++k) {
        double cma = courier::bench::median(rate[k][0]);
        double mapped = courier::bench::median(rate[k][1]);
        std::printf("RESULT cma_vs_mapped %zu process_vm_readv %.1f mapped %.1f ratio %.2f\n",
                    sizes[k], cma, mapped, mapped / cma);
    }
    std::free(dst);
    return 0;
}
