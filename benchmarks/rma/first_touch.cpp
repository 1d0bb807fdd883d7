// SPDX-License-Identifier: BSL-1.0
// What the first touch of a page of memory costs, against a touch of a page already in use:
// the cost a buffer pays the first time a message lands in it. Each case maps BYTES (default
// 32 MiB), touches one byte per 4 KiB page (a write, or a read), and touches them again.
//   first_touch [--bytes=N] [--rounds=N]
// Cases: anonymous private memory (malloc's large blocks), the same mapped with MAP_POPULATE
// (page tables filled by the kernel at mmap), and a POSIX shared-memory file (shm_open, as
// shm's regions and Courier's outbox) written by its owner and read by a second mapping.
// Prints one RESULT line per case: RESULT first_touch <case> <first us/page> <again us/page>.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t page = 4096;
volatile std::byte sink; ///< where the reads go, so that they happen

/// Microseconds per page of one pass over `p`, writing or reading one byte per page.
double pass(std::byte* p, std::size_t bytes, bool write) {
    auto t0 = clock_type::now();
    if (write) {
        for (std::size_t i = 0; i < bytes; i += page) {
            *reinterpret_cast<volatile std::byte*>(p + i) = std::byte{1};
        }
    } else {
        std::byte sum{};
        for (std::size_t i = 0; i < bytes; i += page) {
            sum ^= *reinterpret_cast<volatile std::byte const*>(p + i);
        }
        sink = sum;
    }
    std::chrono::duration<double, std::micro> d = clock_type::now() - t0;
    return d.count() / static_cast<double>(bytes / page);
}

struct figure {
    double first, again;
};

figure anonymous(std::size_t bytes, bool populate) {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m == MAP_FAILED) {
        std::perror("first_touch: mmap");
        std::exit(1);
    }
    ::madvise(m, bytes, MADV_NOHUGEPAGE); // 4 KiB pages, as most of a heap's
    auto* p = static_cast<std::byte*>(m);
    figure f{pass(p, bytes, true), pass(p, bytes, true)};
    ::munmap(m, bytes);
    return f;
}

/// A shared-memory file: {owner's first write, again}, {a reader's first read, again}.
std::pair<figure, figure> shared(std::size_t bytes) {
    std::string name = "/courier-first-touch-" + std::to_string(::getpid());
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
        std::perror("first_touch: shm_open");
        std::exit(1);
    }
    ::shm_unlink(name.c_str());
    void* w = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* r = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (w == MAP_FAILED || r == MAP_FAILED) {
        std::perror("first_touch: mmap");
        std::exit(1);
    }
    auto* pw = static_cast<std::byte*>(w);
    auto* pr = static_cast<std::byte*>(r);
    figure owner{pass(pw, bytes, true), pass(pw, bytes, true)};
    figure reader{pass(pr, bytes, false), pass(pr, bytes, false)};
    ::munmap(w, bytes);
    ::munmap(r, bytes);
    return {owner, reader};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    std::size_t bytes = std::size_t{32} << 20;
    int rounds = 5;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.rfind("--bytes=", 0) == 0) {
            bytes = std::max<std::size_t>(std::strtoull(argv[i] + 8, nullptr, 10), page);
            bytes = bytes / page * page;
        } else if (a.rfind("--rounds=", 0) == 0) {
            rounds = std::max(1, std::atoi(argv[i] + 9));
        } else {
            std::fprintf(stderr, "usage: first_touch [--bytes=N] [--rounds=N]\n");
            return 2;
        }
    }
    char const* names[] = {"anonymous-write", "populated-write", "shared-owner-write",
                           "shared-reader-read"};
    std::vector<double> first[4], again[4];
    for (int r = 0; r < rounds; ++r) {
        figure f[4];
        f[0] = anonymous(bytes, false);
        f[1] = anonymous(bytes, true);
        auto [owner, reader] = shared(bytes);
        f[2] = owner;
        f[3] = reader;
        for (int c = 0; c < 4; ++c) {
            first[c].push_back(f[c].first);
            again[c].push_back(f[c].again);
        }
    }
    std::printf("%-20s %14s %14s   (us per 4 KiB page, median of %d rounds of %zu MiB)\n", "case",
                "first touch", "again", rounds, bytes >> 20);
    for (int c = 0; c < 4; ++c) {
        std::printf("%-20s %14.3f %14.3f\n", names[c], median(first[c]), median(again[c]));
    }
    for (int c = 0; c < 4; ++c) {
        std::printf("RESULT first_touch %s %.3f %.3f\n", names[c], median(first[c]),
                    median(again[c]));
    }
    return 0;
}
