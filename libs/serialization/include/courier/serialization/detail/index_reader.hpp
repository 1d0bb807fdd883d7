// SPDX-License-Identifier: BSL-1.0
// index_reader: the bounds-checked reads of a stream's index bytes that input_archive and
// flat_reader share (flat_stream.hpp), with their errors: one definition of what a truncated
// read, a count that cannot fit, a bad varint or trailing bytes are, and of their words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace courier::serialization::detail {

/// load_limits::max_empty_elements' default (input_archive.hpp), flat_reader's limit.
inline constexpr std::size_t default_max_empty_elements = std::size_t{1} << 20;

class index_reader {
public:
    void load_bytes(void* p, std::size_t n) {
        if (n > static_cast<std::size_t>(end_ - cur_)) [[unlikely]] {
            throw_truncated(n);
        }
        std::memcpy(p, cur_, n);
        cur_ += n;
    }
    template <class T>
    requires std::is_trivially_copyable_v<T> T load_value() {
        T v;
        load_bytes(&v, sizeof(T));
        return v;
    }
    std::uint64_t load_size() {
        if (cur_ != end_ && static_cast<std::uint8_t>(*cur_) < 0x80) [[likely]] {
            return static_cast<std::uint8_t>(*cur_++);
        }
        return load_size_slow();
    }
    /// Reads an element count and checks that `count * min_element_bytes` fits in what remains.
    /// Inline for the common case, a count whose bytes fit in the index bytes left (strings and
    /// vectors of every message load one; min_element_bytes is a constant there).
    std::size_t load_count(std::size_t min_element_bytes) {
        std::uint64_t n = load_size();
        if (min_element_bytes == 0 || n > static_cast<std::size_t>(end_ - cur_) / min_element_bytes)
            [[unlikely]] {
            check_count(n, min_element_bytes); // counts the external chunks too; throws
        }
        return static_cast<std::size_t>(n);
    }
    /// Throws unless `n` elements of at least `min_element_bytes` each fit in what remains
    /// (elements of no bytes: at most max_empty_elements more than the bytes left).
    void check_count(std::uint64_t n, std::size_t min_element_bytes);

    /// Bytes not yet read: index bytes plus the external chunks not yet taken.
    std::size_t remaining() const noexcept {
        return static_cast<std::size_t>(end_ - cur_) + external_remaining_;
    }
    /// Offset of the read position in the index buffer (for error messages).
    std::size_t position() const noexcept { return static_cast<std::size_t>(cur_ - begin_); }

    /// Throws serialization_error: `what`, and where in the index.
    [[noreturn]] void fail(std::string const& what) const;

protected:
    index_reader() = default;
    ~index_reader() = default;
    index_reader(index_reader const&) = delete;
    index_reader& operator=(index_reader const&) = delete;

    std::uint64_t load_size_slow();
    [[noreturn]] void throw_truncated(std::size_t n) const;
    /// Throws unless every index byte was read.
    void check_index_consumed() const {
        if (cur_ != end_) [[unlikely]] {
            fail_trailing();
        }
    }
    [[noreturn]] void fail_trailing() const;
    /// The error of a block of `n` bytes that should be the next pointer or rma chunk when the
    /// stream has no more.
    [[noreturn]] void fail_no_chunk(std::size_t n) const;

    std::byte const* begin_ = nullptr;
    std::byte const* cur_ = nullptr;
    std::byte const* end_ = nullptr;
    std::size_t external_remaining_ = 0;
    std::size_t max_empty_elements_ = default_max_empty_elements;
};

} // namespace courier::serialization::detail
