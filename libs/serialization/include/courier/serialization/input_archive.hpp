// SPDX-License-Identifier: BSL-1.0
// input_archive: reads values back from a message, checking every read.
//
// Every read is bounds-checked; every count is checked against the bytes that remain before
// anything is allocated; blocks at or above the threshold recorded in the header must match the
// next pointer/rma chunk exactly. Any mismatch throws serialization_error naming what was
// expected, what was found, and where. The message must outlive the archive; loaders that
// adopt chunk memory (serialize_buffer) share the chunk's owner instead of copying.
#pragma once

#include <courier/serialization/chunk.hpp>
#include <courier/serialization/detail/index_reader.hpp>
#include <courier/serialization/detail/node_queue.hpp>
#include <courier/serialization/detail/type_table.hpp>
#include <courier/serialization/error.hpp>
#include <courier/serialization/message.hpp>
#include <courier/serialization/traits.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace courier::serialization {

namespace detail {
class load_tracking;
} // namespace detail

/// Limits applied while loading, against hostile or corrupted input.
struct load_limits {
    /// Element counts of types that may occupy zero bytes on the wire (empty structs,
    /// monostate) may exceed the bytes left by at most this much.
    std::size_t max_empty_elements = detail::default_max_empty_elements;
    /// Deep copy (deep_copy.hpp): nodes and arrays one load may allocate, and their bytes.
    std::size_t max_deep_allocations = std::size_t{1} << 32;
    std::size_t max_deep_bytes = std::size_t{1} << 40;
};

class input_archive : public detail::index_reader {
public:
    static constexpr bool is_saving = false;
    static constexpr bool is_loading = true;

    /// Validates the message (header, chunk list) and positions after the header.
    explicit input_archive(message const& m, load_limits const& limits = {});
    input_archive(input_archive const&) = delete;
    input_archive& operator=(input_archive const&) = delete;
    ~input_archive();

    template <class T>
    input_archive& operator&(T&& v) {
        load(std::forward<T>(v));
        return *this;
    }
    template <class T>
    input_archive& operator>>(T&& v) {
        load(std::forward<T>(v));
        return *this;
    }
    template <class... Ts>
    void operator()(Ts&&... vs) {
        (load(std::forward<Ts>(vs)), ...);
    }
    template <class T>
    void load(T&& v) {
        serializer<std::remove_cvref_t<T>>::load(*this, v);
    }

    /// A contiguous bitwise block of `n` bytes, copied to `p`. Inline when it is in the index
    /// bytes (below the zero-copy threshold), the common case.
    void load_block(void* p, std::size_t n) {
        if (n < threshold_ && n != 0 && n <= static_cast<std::size_t>(end_ - cur_)) [[likely]] {
            std::memcpy(p, cur_, n);
            cur_ += n;
            return;
        }
        load_block_slow(p, n);
    }
    /// The next pointer/rma chunk, which must be `n` bytes, copied to `p` (deep copy's arrays,
    /// whose placement the stream records).
    void load_external_block(void* p, std::size_t n);

    /// A zero-copy view of the next block of `n` bytes: either index bytes (consumed) or the
    /// whole next pointer/rma chunk (with its owner, if the message has one).
    struct block {
        std::byte const* data = nullptr;
        std::size_t size = 0;
        chunk_type type = chunk_type::index;
        std::uint64_t rkey = 0;
        std::shared_ptr<void const> const* owner = nullptr;
    };
    block take_block(std::size_t n);

    std::size_t threshold() const noexcept { return threshold_; }
    load_limits const& limits() const noexcept { return limits_; }
    /// Whether the message has chunks its receiver refused (message::set_refused): reading one
    /// throws serialization_error with the reason, which is then not the bytes' fault.
    bool refused() const noexcept { return msg_.refused(); }

    /// Throws unless every index byte and every chunk was consumed (trailing garbage).
    void finish() const;

    /// Class information (detail/type_table.hpp): whether the stream came with a type table
    /// (a checkpoint file), and the version type `name` was written at. Throws
    /// serialization_error if the table does not hold the type.
    bool has_type_table() const noexcept { return types_ != nullptr; }
    unsigned written_version(std::size_t slot, char const* name) {
        auto v = types_->version(slot, name);
        if (!v) [[unlikely]] {
            fail_not_in_table(name);
        }
        return *v;
    }

    detail::load_tracking& tracking();

    // ---- deep copy support (deep_copy.hpp): undo a failed load ----
    /// Marks [p, p + n) as memory that outlives this load (the values load() fills): pointers
    /// assigned inside it are reset if the load fails. `p` itself counts as the top-level
    /// target (a deep-copy wrapper passed directly to load()).
    void set_top_level(void const* p, std::size_t n) noexcept {
        top_level_ = p;
        top_level_size_ = n;
    }
    bool is_top_level(void const* p) const noexcept { return p == top_level_; }
    /// Counts one deep allocation of `bytes` against load_limits; throws past them.
    void count_deep_allocation(std::size_t bytes);
    /// An allocation this load made: `destroy(p)` frees it if the load fails. Returns its id.
    std::size_t register_allocation(void* p, std::size_t bytes, void (*destroy)(void*));
    /// The allocation now belongs to someone else (no longer freed on failure).
    void release_allocation(std::size_t id) noexcept;
    /// A pointer at `slot` was assigned. If it lies in memory that outlives the failure
    /// (inside an allocation of this load, inside the top-level value, or `top_level`), it is
    /// recorded: `reset(slot)` runs on failure before anything is freed. Returns whether it
    /// was recorded.
    bool record_slot(void* slot, bool top_level, void (*reset)(void*));
    /// Undoes the load so far (empties the shared_ptr-owned objects it built, resets recorded
    /// pointers, then frees the allocations). Runs by
    /// itself if the archive is destroyed by an exception; idempotent.
    void rollback() noexcept;
    /// Deep copy: the reader's side of output_archive::defer_node (same order, same rule).
    using node_loader = void (*)(input_archive&, void*);
    void defer_node(void* node, std::size_t bytes, node_loader load);
    /// Deep copy: [p, p + n) is an allocation of this load being filled in place (an array of
    /// nodes): pointers assigned inside it are recorded (see record_slot). Pair with
    /// end_stable_range().
    void begin_stable_range(void const* p, std::size_t n) {
        auto s = reinterpret_cast<std::uintptr_t>(p);
        stable_.emplace_back(s, s + n);
    }
    void end_stable_range() noexcept { stable_.pop_back(); }

private:
    struct deferred_node {
        void* node;
        std::size_t bytes;
        node_loader load;
    };
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> stable_;
    detail::node_queue<deferred_node> deferred_;
    struct deep_state;
    deep_state& deep();
    std::unique_ptr<deep_state> deep_;
    void const* top_level_ = nullptr;
    std::size_t top_level_size_ = 0;
    // The exceptions in flight when the first state that a failed load rolls back was made
    // (not at construction: std::uncaught_exceptions() is a call through libstdc++'s TLS, and
    // most archives, a small parcel's, never make such state). The destructor rolls back if
    // more are in flight then. (Unlike a count taken at construction, this misses only state
    // first made while an exception unwinds through the archive's own scope: a load from a
    // destructor during that unwinding.)
    int uncaught_ = 0;
    void note_uncaught() noexcept {
        if (!deep_ || !tracking_) { // the first of the two
            uncaught_ = std::uncaught_exceptions();
        }
    }

    message const& msg_;
    std::size_t threshold_ = 0;
    std::size_t next_chunk_ = 0;
    load_limits limits_;
    std::unique_ptr<detail::load_tracking> tracking_;
    std::unique_ptr<detail::type_resolver> types_;

    void load_block_slow(void* p, std::size_t n);
    [[noreturn]] void fail_not_in_table(char const* name) const;
    std::size_t next_external_chunk(std::size_t n);
};

} // namespace courier::serialization
