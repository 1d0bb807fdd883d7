// SPDX-License-Identifier: BSL-1.0
// Whole transfers on a file descriptor: retried after a partial transfer or EINTR.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace courier::io {

namespace detail {
/// Moves all `n` bytes at `c` with `io` (::read or ::write); false on an error (errno set),
/// end of file or a zero-byte write.
template <class Io, class Char>
bool transfer_all(Io io, int fd, Char* c, std::size_t n) noexcept {
    while (n > 0) {
        ssize_t done = io(fd, c, n);
        if (done < 0 && errno == EINTR) {
            continue;
        }
        if (done <= 0) {
            return false;
        }
        c += done;
        n -= static_cast<std::size_t>(done);
    }
    return true;
}
} // namespace detail

/// Writes all `n` bytes at `p` to `fd`; false on an error (errno set) or a zero-byte write.
inline bool write_all(int fd, void const* p, std::size_t n) noexcept {
    return detail::transfer_all(::write, fd, static_cast<char const*>(p), n);
}

/// Reads exactly `n` bytes from `fd` into `p`; false on an error (errno set) or end of file.
inline bool read_all(int fd, void* p, std::size_t n) noexcept {
    return detail::transfer_all(::read, fd, static_cast<char*>(p), n);
}

} // namespace courier::io
