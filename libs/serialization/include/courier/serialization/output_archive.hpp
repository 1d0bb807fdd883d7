// SPDX-License-Identifier: BSL-1.0
// output_archive: writes values into a message in one pass (HPX paper, section 3.1).
//
// Small data is appended to the message's index buffer; a contiguous bitwise block at or above
// the zero-copy threshold closes the current index chunk and becomes a pointer chunk that
// references the caller's memory (or an rma chunk for registered memory). Integers keep their
// native width; sizes and counts are LEB128 varints. The buffer grows geometrically; a block
// that does not fit triggers growth before it is copied, so it is copied once.
//
// Lifetime: memory referenced by pointer chunks must stay valid until the message is sent or
// destroyed. The archive must be finish()ed (the destructor does it) before the message is used.
#pragma once

#include <courier/serialization/chunk.hpp>
#include <courier/serialization/detail/node_queue.hpp>
#include <courier/serialization/detail/type_table.hpp>
#include <courier/serialization/detail/varint.hpp>
#include <courier/serialization/message.hpp>
#include <courier/serialization/traits.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace courier::serialization {

namespace detail {
class save_tracking;
}

/// Where a streaming archive sends the finished parts of its stream, in order, instead of
/// keeping them in the message (checkpoints written while they are produced: file.hpp).
class chunk_sink {
public:
    virtual ~chunk_sink() = default;
    /// `n` bytes of index data (the stream's header first); the bytes are reused afterwards.
    virtual void index_segment(std::byte const* p, std::size_t n) = 0;
    /// A pointer or rma block, written from where it lies.
    virtual void external_segment(chunk_type t, void const* p, std::size_t n) = 0;
    /// Whether the stream records class information in a type table (checkpoint files) instead
    /// of writing versions inline; the table then arrives through type_table() at the end.
    virtual bool records_types() const { return false; }
    virtual void type_table(std::span<std::byte const> /*encoded*/) {}
};

/// A streaming archive's index buffer: flushed to the sink whenever it is full.
inline constexpr std::size_t streaming_buffer_size = std::size_t{1} << 20;

class output_archive {
public:
    static constexpr bool is_saving = true;
    static constexpr bool is_loading = false;

    /// Clears `m` (keeping its capacity) and starts writing into it with default_options().
    explicit output_archive(message& m);
    output_archive(message& m, options const& o);
    /// Streams to `sink`: index data leaves every streaming_buffer_size bytes and external
    /// blocks leave at once, so memory use does not grow with the stream. `m` is only scratch.
    output_archive(message& m, options const& o, chunk_sink* sink);
    output_archive(output_archive const&) = delete;
    output_archive& operator=(output_archive const&) = delete;
    ~output_archive();

    template <class T>
    output_archive& operator&(T const& v) {
        save(v);
        return *this;
    }
    template <class T>
    output_archive& operator<<(T const& v) {
        save(v);
        return *this;
    }
    template <class... Ts>
    void operator()(Ts const&... vs) {
        (save(vs), ...);
    }
    template <class T>
    void save(T const& v) {
        serializer<std::remove_cv_t<T>>::save(*this, v);
    }

    /// Appends `n` bytes to the index buffer.
    void save_bytes(void const* p, std::size_t n) {
        if (n > static_cast<std::size_t>(end_ - cur_)) [[unlikely]] {
            grow(n);
        }
        std::memcpy(cur_, p, n);
        cur_ += n;
    }
    template <class T>
    requires std::is_trivially_copyable_v<T>
    void save_value(T const& v) { save_bytes(&v, sizeof(T)); }
    void save_size(std::uint64_t v) {
        if (static_cast<std::size_t>(end_ - cur_) < detail::max_varint_bytes) [[unlikely]] {
            grow(detail::max_varint_bytes);
        }
        if (v < 0x80) {
            *cur_++ = static_cast<std::byte>(v);
        } else {
            cur_ += detail::encode_varint(v, cur_);
        }
    }
    /// A contiguous bitwise block: a pointer chunk when zero copy applies, else copied.
    void save_block(void const* p, std::size_t n) {
        if (n >= threshold_) {
            add_external(chunk_type::pointer, p, n, 0);
        } else if (n != 0) {
            save_bytes(p, n);
        }
    }
    /// A block of registered memory: an rma chunk carrying `rkey` when zero copy applies.
    void save_rma_block(void const* p, std::size_t n, std::uint64_t rkey) {
        if (n >= threshold_) {
            add_external(chunk_type::rma, p, n, rkey);
        } else if (n != 0) {
            save_bytes(p, n);
        }
    }
    /// Deep copy's arrays: whether a block of `n` bytes should be its own chunk
    /// (options::deep_array_threshold), and writing one as a pointer chunk regardless.
    bool is_deep_external(std::size_t n) const noexcept { return n >= deep_threshold_; }
    void save_external_block(void const* p, std::size_t n) {
        add_external(chunk_type::pointer, p, n, 0);
    }
    /// Whether a block of `n` bytes would travel as its own chunk.
    bool is_zero_copy(std::size_t n) const noexcept { return n >= threshold_; }
    std::size_t threshold() const noexcept { return threshold_; }
    /// Keeps a reference-counted payload alive as long as the message.
    void keep_alive(std::shared_ptr<void const> ref);
    /// Bytes written to the index buffer so far (header included).
    std::size_t index_bytes() const noexcept { return static_cast<std::size_t>(cur_ - begin_); }

    /// Closes the last index chunk and publishes the size to the message. Idempotent.
    void finish();

    /// Class information (detail/type_table.hpp): whether this archive records the version of
    /// each user type once in a table instead of before every object (checkpoint files), and
    /// recording one. Messages write versions inline and pay one predictable branch.
    bool records_types() const noexcept { return types_ != nullptr; }
    void record_type(std::size_t slot, char const* name, unsigned version) {
        types_->record(slot, name, version);
    }

    detail::save_tracking& tracking();

    /// Deep copy: shared() nodes are written breadth first from a queue, not by recursion, so
    /// a list or ring of a million nodes needs no deeper stack than one node (fibers have
    /// 64 KiB). Inside a drain, defer_node() queues; outside, it writes the node and then
    /// everything reached from it before returning. The reader mirrors it exactly.
    using node_saver = void (*)(output_archive&, void const*);
    void defer_node(void const* node, node_saver save);

private:
    struct deferred_node {
        void const* node;
        node_saver save;
    };
    detail::node_queue<deferred_node> deferred_;
    message& msg_;
    std::byte* begin_ = nullptr;
    std::byte* cur_ = nullptr;
    std::byte* end_ = nullptr;
    std::size_t threshold_ = std::numeric_limits<std::size_t>::max();
    std::size_t chunk_start_ = 0;
    std::size_t deep_threshold_ = std::numeric_limits<std::size_t>::max();
    pointer_tracking tracking_kind_ = pointer_tracking::pointer_map;
    std::unique_ptr<detail::save_tracking> tracking_;
    std::unique_ptr<detail::type_recorder> types_;
    chunk_sink* sink_ = nullptr;
    bool finished_ = false;

    void start(options const& o);
    void grow(std::size_t n);
    void close_index_chunk();
    void flush_to_sink(); // sink_: emit the open index bytes and reuse the buffer
    void add_external(chunk_type t, void const* p, std::size_t n, std::uint64_t rkey);
};

} // namespace courier::serialization
