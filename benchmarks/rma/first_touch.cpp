// SPDX-License-Identifier: BSL-1.0
// What the first touch of a page of memory costs, against a touch of a page already in use:
// the cost a buffer pays the first time a message lands in it. Each case maps BYTES (default
// 32 MiB), touches one byte per 4 KiB page (a write, or a read), and touches them again.
//   first_touch [--bytes=N] [--rounds=N]
// Cases: anonymous private memory (malloc's large blocks), the same mapped with MAP_POPULATE
// (page tables filled by the kernel at mmap), and a POSIX shared-memory file (shm_open, as
// shm's regions and Courier's outbox) written by its owner and read by a second mapping.
// Prints one RESULT line per case: RESULT first_touch <case> <first us/page> <again us/page>.
#include "common/harness.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t page = 4096;

/// Microseconds per page of one pass over `p`, writing or reading one byte per page.
double pass(std::byte* p, std::size_t bytes, bool write) {
    auto t0 = clock_type::now();
    if (write) {
        for (std::size_t i = 0; i < bytes; i += page) {
            *reinterpret_cast<volatile std::byte*>(p + i) = std::byte{1};
        }
    } else {
        for (std::size_t i = 0; i < bytes; i += page) {
            (void)*reinterpret_cast<volatile std::byte const*>(p + i); // a volatile read happens
        }
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

/// The number after `prefix` in `arg` if all of it is one in [lo, hi].
std::optional<std::size_t> number(std::string_view arg, std::string_view prefix, std::size_t lo,
                                  std::size_t hi) {
    std::string_view digits = arg.substr(prefix.size());
    std::size_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc{} || end != digits.data() + digits.size() || v < lo || v > hi) {
        return std::nullopt;
    }
    return v;
}

} // namespace

int main(int argc, char** argv) {
    std::size_t bytes = std::size_t{32} << 20;
    std::size_t rounds = 5;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        std::optional<std::size_t> v;
        if (a.rfind("--bytes=", 0) == 0 &&
            (v = number(a, "--bytes=", page, std::size_t{1} << 34))) {
            bytes = *v / page * page;
        } else if (a.rfind("--rounds=", 0) == 0 && (v = number(a, "--rounds=", 1, 1000))) {
            rounds = *v;
        } else {
            std::fprintf(stderr,
                         "first_touch: bad argument %s (usage: first_touch [--bytes=N, 4096 to "
                         "16 GiB] [--rounds=N, 1 to 1000])\n",
                         argv[i]);
            return 2;
        }
    }
    char const* names[] = {"anonymous-write", "populated-write", "shared-owner-write",
                           "shared-reader-read"};
    std::array<std::vector<double>, 4> first, again;
    for (std::size_t r = 0; r < rounds; ++r) {
        figure const plain = anonymous(bytes, false), populated = anonymous(bytes, true);
        auto const [owner, reader] = shared(bytes);
        std::array<figure, 4> const f{plain, populated, owner, reader};
        for (std::size_t c = 0; c < f.size(); ++c) {
            first[c].push_back(f[c].first);
            again[c].push_back(f[c].again);
        }
    }
    std::printf("%-20s %14s %14s   (us per 4 KiB page, median of %zu rounds of %zu MiB)\n", "case",
                "first touch", "again", rounds, bytes >> 20);
    std::array<std::pair<double, double>, 4> m;
    for (std::size_t c = 0; c < m.size(); ++c) {
        m[c] = {courier::bench::median(first[c]), courier::bench::median(again[c])};
        std::printf("%-20s %14.3f %14.3f\n", names[c], m[c].first, m[c].second);
    }
    for (std::size_t c = 0; c < m.size(); ++c) {
        std::printf("RESULT first_touch %s %.3f %.3f\n", names[c], m[c].first, m[c].second);
    }
    return 0;
}
