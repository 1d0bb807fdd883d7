// SPDX-License-Identifier: BSL-1.0
// Flat streams: a message's index written straight into memory its writer provides, for values
// whose saved form is bytes of the index alone (numbers, enums, a serialize_buffer below the
// zero-copy threshold): no message, no chunk list, no reference kept. A small parcel's stream
// then goes into its coalesced batch in one pass (the runtime's posts).
//
// Two passes over the same serializers (those that say they are written for any archive type:
// the arithmetic one and serialize_buffer's): flat_sizer counts the bytes and says whether every
// value is flat, flat_writer writes them. The bytes are exactly what output_archive writes for the
// same values with the same options (the tests compare them), so readers cannot tell the two apart.
//
// flat_reader reads such values back from any stream of one index chunk (whoever wrote it),
// checking every read as input_archive does, with the same errors: without a message, a chunk
// list, or the state that deep copy and tracking need (the receiving half of the runtime's
// posts, and of its small replies: ~240 instructions less per parcel than a message view and
// an input archive).
#pragma once

#include <courier/serialization/chunk.hpp>
#include <courier/serialization/detail/index_reader.hpp>
#include <courier/serialization/detail/varint.hpp>
#include <courier/serialization/message.hpp>
#include <courier/serialization/serializer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

namespace courier::serialization {

/// The zero-copy threshold a stream is written with: blocks of at least `threshold` bytes
/// become pointer chunks (SIZE_MAX: never), and `recorded` is what the header says of it.
struct stream_threshold {
    std::size_t threshold;
    std::uint32_t recorded;
};
stream_threshold stream_threshold_of(options const& o) noexcept;
/// Writes a message's 8-byte header (message.hpp) at `at`.
void write_stream_header(std::byte* at, std::uint32_t recorded) noexcept;

/// Counts the bytes a flat stream's values take; not flat() once one of them would leave the
/// index (a block at or above the threshold, or a reference the message would keep).
class flat_sizer {
public:
    static constexpr bool is_saving = true;
    static constexpr bool is_loading = false;
    explicit flat_sizer(std::size_t threshold) noexcept : threshold_(threshold) {}

    template <class T>
    void save(T const& v) {
        serializer<std::remove_cv_t<T>>::save(*this, v);
    }
    void save_bytes(void const*, std::size_t n) noexcept { size_ += n; }
    template <class T>
    requires std::is_trivially_copyable_v<T>
    void save_value(T const&) noexcept { size_ += sizeof(T); }
    void save_size(std::uint64_t v) noexcept { size_ += detail::varint_size(v); }
    void save_block(void const*, std::size_t n) noexcept {
        if (n >= threshold_) {
            flat_ = false;
        }
        size_ += n;
    }
    bool is_zero_copy(std::size_t n) const noexcept { return n >= threshold_; }
    void keep_alive(std::shared_ptr<void const> const&) noexcept { flat_ = false; }

    bool flat() const noexcept { return flat_; }
    std::size_t size() const noexcept { return size_; }

private:
    std::size_t threshold_;
    std::size_t size_ = 0;
    bool flat_ = true;
};

/// Writes the values flat_sizer counted (flat, with the same threshold) at `at`, which has
/// room for all of them.
class flat_writer {
public:
    static constexpr bool is_saving = true;
    static constexpr bool is_loading = false;
    flat_writer(std::byte* at, std::size_t threshold) noexcept : cur_(at), threshold_(threshold) {}

    template <class T>
    void save(T const& v) {
        serializer<std::remove_cv_t<T>>::save(*this, v);
    }
    void save_bytes(void const* p, std::size_t n) noexcept {
        std::memcpy(cur_, p, n);
        cur_ += n;
    }
    template <class T>
    requires std::is_trivially_copyable_v<T>
    void save_value(T const& v) noexcept { save_bytes(&v, sizeof(T)); }
    void save_size(std::uint64_t v) noexcept {
        if (v < 0x80) {
            *cur_++ = static_cast<std::byte>(v);
        } else {
            cur_ += detail::encode_varint(v, cur_);
        }
    }
    void save_block(void const* p, std::size_t n) noexcept {
        if (n <= 16) {
            copy_small(cur_, static_cast<std::byte const*>(p), n);
            cur_ += n;
        } else {
            save_bytes(p, n);
        }
    }
    bool is_zero_copy(std::size_t n) const noexcept { return n >= threshold_; }
    void keep_alive(std::shared_ptr<void const> const&) noexcept {} // never: the sizer said flat
    std::byte* position() const noexcept { return cur_; }

private:
    /// Copies n <= 16 bytes inline: two (overlapping) loads and stores of 8, 4 or 1 bytes. A
    /// small block (a post's few bytes) otherwise pays a call into the library's memcpy.
    static void copy_small(std::byte* to, std::byte const* from, std::size_t n) noexcept {
        auto const two = [&]<class W>(W) {
            W head, tail;
            std::memcpy(&head, from, sizeof(W));
            std::memcpy(&tail, from + n - sizeof(W), sizeof(W));
            std::memcpy(to, &head, sizeof(W));
            std::memcpy(to + n - sizeof(W), &tail, sizeof(W));
        };
        if (n >= 8) {
            two(std::uint64_t{});
        } else if (n >= 4) {
            two(std::uint32_t{});
        } else if (n != 0) {
            // 1-3 bytes: the first, the middle and the last (some the same one).
            std::byte const a = from[0], b = from[n / 2], c = from[n - 1];
            to[0] = a;
            to[n / 2] = b;
            to[n - 1] = c;
        }
    }

    std::byte* cur_;
    std::size_t threshold_;
};

/// Whether T's serializer says it writes flat streams (`flat_stream = true`: the arithmetic one
/// and serialize_buffer's, written for any archive). A template save() of a user's own
/// serializer is not taken on trust: its body may save what only an output_archive can.
template <class T>
concept flat_savable = requires(flat_sizer& s, flat_writer& w, T const& v) {
    requires serializer<std::remove_cv_t<T>>::flat_stream;
    serializer<std::remove_cv_t<T>>::save(s, v);
    serializer<std::remove_cv_t<T>>::save(w, v);
};

/// Reads the values of a stream of one index chunk (header included): numbers, enums and
/// serialize_buffers, through the serializers that say flat_stream = true (flat_loadable). Every
/// read is bounds-checked by the same code as input_archive's (detail::index_reader), with the
/// default load_limits, and a block at or above the recorded zero-copy threshold, which would
/// be a pointer chunk, is an error (the stream has none). The bytes must outlive the reader;
/// what it reads does not refer to them (a serialize_buffer copies its bytes).
class flat_reader : public detail::index_reader {
public:
    static constexpr bool is_saving = false;
    static constexpr bool is_loading = true;

    /// Checks the header (message::header_threshold; throws serialization_error) and positions
    /// after it.
    explicit flat_reader(std::span<std::byte const> stream)
        : threshold_(message::header_threshold(stream)) {
        begin_ = stream.data();
        cur_ = begin_ + message_header_size;
        end_ = begin_ + stream.size();
    }

    template <class T>
    void load(T&& v) {
        serializer<std::remove_cvref_t<T>>::load(*this, v);
    }
    /// What input_archive::take_block gives, for index bytes: never an owner to share.
    struct block {
        std::byte const* data = nullptr;
        std::size_t size = 0;
        std::shared_ptr<void const> const* owner = nullptr;
    };
    block take_block(std::size_t n) {
        if (n >= threshold_) [[unlikely]] {
            fail_no_chunk(n); // the stream has none
        }
        if (n > static_cast<std::size_t>(end_ - cur_)) [[unlikely]] {
            throw_truncated(n);
        }
        block b{cur_, n, nullptr};
        cur_ += n;
        return b;
    }
    /// Moves past `n` bytes (a parcel head its caller read where it lies).
    void skip(std::size_t n) {
        if (n > static_cast<std::size_t>(end_ - cur_)) [[unlikely]] {
            throw_truncated(n);
        }
        cur_ += n;
    }
    std::size_t threshold() const noexcept { return threshold_; }
    /// Throws unless every byte was read (trailing garbage).
    void finish() const { check_index_consumed(); }

private:
    std::size_t threshold_;
};

/// Whether T's serializer reads flat streams (flat_stream = true, and a load() for any archive).
/// flat_stream = true is the serializer's promise that its save() and load() use only what
/// flat_sizer, flat_writer and flat_reader offer: a load() that reads more fails to compile
/// where an action of such arguments is registered.
template <class T>
concept flat_loadable = requires(flat_reader& r, T& v) {
    requires serializer<std::remove_cv_t<T>>::flat_stream;
    serializer<std::remove_cv_t<T>>::load(r, v);
};

} // namespace courier::serialization
