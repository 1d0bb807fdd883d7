// SPDX-License-Identifier: BSL-1.0
#include <courier/common/small_alloc.hpp>
#include <courier/serialization/error.hpp>
#include <courier/serialization/message.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

namespace courier::serialization {

namespace {
/// Message buffers are pooled in six size classes, 4 KiB (message::pooled_capacity, where an
/// archive starts) to 128 KiB, each a power of two: a buffer asked for up to 128 KiB is rounded
/// up to its class (at most twice the bytes asked for), so that an eager message of any size
/// (up to 96 KiB of index on tcp) leaves its buffer for the next one of its class instead of
/// going to malloc (above a page, a malloc and free cost ~700 instructions and often a page
/// fault). Larger buffers are not pooled.
constexpr std::size_t buffer_classes = 6;
constexpr std::size_t class_capacity(std::size_t cls) noexcept {
    return message::pooled_capacity << cls;
}
constexpr std::size_t max_pooled = class_capacity(buffer_classes - 1);
/// The class of a buffer of `capacity` bytes (exactly a class's size), else buffer_classes.
std::size_t class_of_capacity(std::size_t capacity) noexcept {
    // (capacity & (capacity - 1)) != 0, not !std::has_single_bit: without -mpopcnt the latter
    // is a call to libgcc's popcount, once per message.
    if (capacity < message::pooled_capacity || capacity > max_pooled ||
        (capacity & (capacity - 1)) != 0) {
        return buffer_classes;
    }
    return static_cast<std::size_t>(std::countr_zero(capacity) -
                                    std::countr_zero(message::pooled_capacity));
}
/// The class a buffer of at least `bytes` is taken from, else buffer_classes (too large).
std::size_t class_for(std::size_t bytes) noexcept {
    if (bytes > max_pooled) {
        return buffer_classes;
    }
    return class_of_capacity(std::bit_ceil(std::max(bytes, message::pooled_capacity)));
}

/// What messages freed on this thread leave for the next message built here: buffers of each
/// class, and chunk lists (a small parcel's received message and its reply each need one).
/// Trivially destructible (the lists are held through a pointer), so it can still be used (as
/// "closed") by destructors that run after the drain at thread exit, such as those of static
/// objects holding messages.
/// Up to 1 MiB of buffers per class (256 of 4 KiB ... 8 of 128 KiB; 6 MiB per thread): a window
/// of parcels builds all its messages before the first is freed, so a cache much smaller than an
/// OSU window (64) mostly misses and sends every message to malloc (the central cache below
/// takes up the larger classes' windows).
struct thread_cache {
    static constexpr std::size_t slots = 256; // of the 4 KiB class
    static constexpr std::size_t slots_of(std::size_t cls) noexcept { return slots >> cls; }
    static constexpr std::size_t max_list_capacity = 16; // larger chunk lists are freed
    std::byte* buffers[buffer_classes][slots];
    std::size_t buffer_count[buffer_classes];
    std::vector<std::vector<serialization_chunk>>* lists;
    bool armed;  // this thread's drain is registered
    bool closed; // the thread is exiting: free, do not cache
};
thread_local thread_cache tl_cache{};

/// Frees what the thread's cache holds when the thread exits (no leak for LSan).
struct thread_cache_drain {
    bool armed = false;
    thread_cache_drain() = default;
    thread_cache_drain(thread_cache_drain const&) = delete;
    thread_cache_drain& operator=(thread_cache_drain const&) = delete;
    ~thread_cache_drain() {
        tl_cache.closed = true;
        for (std::size_t cls = 0; cls < buffer_classes; ++cls) {
            while (tl_cache.buffer_count[cls] > 0) {
                std::free(tl_cache.buffers[cls][--tl_cache.buffer_count[cls]]);
            }
        }
        delete std::exchange(tl_cache.lists, nullptr);
    }
};
thread_local thread_cache_drain tl_drain;

/// Where a thread whose cache is full leaves half of it, and a thread whose cache is empty takes
/// from: a received message is built on the thread that polls the transport and freed on the
/// worker that ran its parcel, so without the exchange one thread's cache would only fill (and
/// free) while the other's would only miss (and allocate), a malloc per parcel. Bounded (4 MiB
/// of buffers per class); what does not fit is freed. Never destroyed: threads may exit after
/// static destruction. A thread whose cache is empty reads the `_stocked` flag first, so that it
/// takes the lock only when there is something to take, not once per message while this is empty
/// too.
struct central_cache {
    static constexpr std::size_t max_entries = 4 * thread_cache::slots;
    static constexpr std::size_t max_buffers(std::size_t cls) noexcept {
        return 4 * thread_cache::slots_of(cls);
    }
    std::mutex mutex;
    std::vector<std::byte*> buffers[buffer_classes];
    std::vector<std::vector<serialization_chunk>> lists;
    std::atomic<bool> buffers_stocked[buffer_classes]{}; // !buffers[c].empty(), under the lock
    std::atomic<bool> lists_stocked{false};              // !lists.empty(), written under the lock
    central_cache() {
        for (std::size_t cls = 0; cls < buffer_classes; ++cls) {
            buffers[cls].reserve(max_buffers(cls));
        }
        lists.reserve(max_entries);
    }
};
central_cache& central() {
    static central_cache* c = new central_cache;
    return *c;
}

/// Moves a thread cache's entries `from` (`count` of them) beyond the first `keep` to the
/// central `to`; frees what does not fit. Returns the new count (`keep`).
template <class T, class Free>
std::size_t spill(T* from, std::size_t count, std::size_t keep, std::vector<T>& to,
                  std::atomic<bool>& stocked, Free free_one) noexcept {
    std::lock_guard g(central().mutex);
    for (std::size_t i = keep; i < count; ++i) {
        if (to.size() < to.capacity()) {
            to.push_back(std::move(from[i])); // within the reserved capacity: no allocation
        } else {
            free_one(from[i]);
        }
    }
    stocked.store(!to.empty(), std::memory_order_relaxed);
    return keep;
}
/// Half of a full thread cache to the central one.
template <class T, class Free>
std::size_t spill_half(T* from, std::size_t count, std::vector<T>& to, std::atomic<bool>& stocked,
                       Free free_one) noexcept {
    return spill(from, count, count / 2, to, stocked, free_one);
}

/// Moves up to half a thread cache's worth of central buffers of class `cls` to `to` (an empty
/// cache).
std::size_t refill_buffers(std::size_t cls, std::byte** to) noexcept {
    central_cache& c = central();
    if (!c.buffers_stocked[cls].load(std::memory_order_relaxed)) {
        return 0;
    }
    std::lock_guard g(c.mutex);
    std::vector<std::byte*>& from = c.buffers[cls];
    std::size_t n = std::min(from.size(), thread_cache::slots_of(cls) / 2);
    std::copy(from.end() - static_cast<std::ptrdiff_t>(n), from.end(), to);
    from.resize(from.size() - n);
    c.buffers_stocked[cls].store(!from.empty(), std::memory_order_relaxed);
    return n;
}

/// The same for chunk lists, into `to` (an empty cache with room reserved).
void refill_lists(std::vector<std::vector<serialization_chunk>>& to) noexcept {
    central_cache& c = central();
    if (!c.lists_stocked.load(std::memory_order_relaxed)) {
        return;
    }
    std::lock_guard g(c.mutex);
    std::size_t n = std::min(c.lists.size(), thread_cache::slots / 2);
    for (std::size_t i = 0; i < n; ++i) {
        to.push_back(std::move(c.lists.back())); // within to's reserved capacity
        c.lists.pop_back();
    }
    c.lists_stocked.store(!c.lists.empty(), std::memory_order_relaxed);
}

/// The thread's cache, its drain registered (for callers about to store into it).
thread_cache& armed_cache() noexcept {
    thread_cache& c = tl_cache;
    if (!c.armed) {
        tl_drain.armed = c.armed = true; // constructs the drain: its destructor will run
    }
    return c;
}
/// A buffer of class `cls` from this thread's cache (refilled from the central one when empty),
/// else null.
std::byte* take_buffer(std::size_t cls) noexcept {
    thread_cache& c = tl_cache;
    if (c.closed) {
        return nullptr;
    }
    if (c.buffer_count[cls] == 0) {
        c.buffer_count[cls] = refill_buffers(cls, c.buffers[cls]);
        if (c.buffer_count[cls] == 0) {
            return nullptr;
        }
        armed_cache(); // the drain frees them if the thread exits
    }
    return c.buffers[cls][--c.buffer_count[cls]];
}
/// Gives a pooled buffer of `capacity` bytes (a class's size, else it is freed) back to this
/// thread's cache.
void give_back(std::byte* b, std::size_t capacity) noexcept {
    if (std::size_t cls = class_of_capacity(capacity); cls < buffer_classes && !tl_cache.closed) {
        thread_cache& c = armed_cache();
        if (c.buffer_count[cls] == thread_cache::slots_of(cls)) {
            c.buffer_count[cls] =
                spill_half(c.buffers[cls], c.buffer_count[cls], central().buffers[cls],
                           central().buffers_stocked[cls], [](std::byte* x) { std::free(x); });
        }
        c.buffers[cls][c.buffer_count[cls]++] = b;
    } else {
        std::free(b);
    }
}

/// The thread's cache of chunk lists, made on first use with room for all its slots (pushes
/// never allocate). Throws std::bad_alloc.
std::vector<std::vector<serialization_chunk>>& list_cache() {
    thread_cache& c = armed_cache();
    if (c.lists == nullptr) {
        auto v = std::make_unique<std::vector<std::vector<serialization_chunk>>>();
        v->reserve(thread_cache::slots);
        c.lists = v.release();
    }
    return *c.lists;
}
} // namespace

std::vector<serialization_chunk> message::chunk_list() {
    thread_cache& c = tl_cache;
    if ((c.lists == nullptr || c.lists->empty()) && !c.closed) {
        try {
            refill_lists(list_cache()); // also a thread that frees none
        } catch (...) { // out of memory for the cache itself: a new list, as without one
            return {};
        }
    }
    if (c.lists != nullptr && !c.lists->empty()) {
        std::vector<serialization_chunk> v = std::move(c.lists->back());
        c.lists->pop_back();
        return v;
    }
    return {};
}

void message::return_thread_cache() noexcept {
    thread_cache& c = tl_cache;
    if (c.closed) {
        return;
    }
    for (std::size_t cls = 0; cls < buffer_classes; ++cls) {
        if (c.buffer_count[cls] != 0) {
            c.buffer_count[cls] =
                spill(c.buffers[cls], c.buffer_count[cls], 0, central().buffers[cls],
                      central().buffers_stocked[cls], [](std::byte* x) { std::free(x); });
        }
    }
    if (c.lists != nullptr && !c.lists->empty()) {
        c.lists->resize(spill(c.lists->data(), c.lists->size(), 0, central().lists,
                              central().lists_stocked,
                              [](std::vector<serialization_chunk>& v) { v = {}; }));
    }
}

void message::release_chunks() noexcept {
    std::size_t cap = chunks_.capacity();
    if (cap == 0 || cap > thread_cache::max_list_capacity || tl_cache.closed) {
        return; // freed with the vector
    }
    try {
        auto& lists = list_cache();
        if (lists.size() == thread_cache::slots) {
            lists.resize(spill_half(lists.data(), lists.size(), central().lists,
                                    central().lists_stocked,
                                    [](std::vector<serialization_chunk>& v) { v = {}; }));
        }
        chunks_.clear();
        lists.push_back(std::move(chunks_));
    } catch (...) { // out of memory for the cache itself: the list is simply freed
    }
}

void message::release_buffer() noexcept {
    if (buffer_ == nullptr) { // moved from, or never written
        return;
    }
    if (borrowed_) {
        borrowed_ = false;
        index_owner_.reset();
    } else if (small_buffer_) {
        courier::detail::small_free(buffer_, capacity_);
        small_buffer_ = false;
    } else {
        give_back(buffer_, capacity_);
    }
    buffer_ = nullptr;
    capacity_ = 0;
}

message::message(message&& o) noexcept
    : buffer_(std::exchange(o.buffer_, nullptr)), size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)), growth_copied_(std::exchange(o.growth_copied_, 0)),
      small_buffer_(std::exchange(o.small_buffer_, false)),
      borrowed_(std::exchange(o.borrowed_, false)), one_chunk_(std::exchange(o.one_chunk_, false)),
      refused_(std::exchange(o.refused_, false)), holds_refs_(std::exchange(o.holds_refs_, false)),
      checked_(std::exchange(o.checked_, false)), checked_result_(o.checked_result_),
      single_(o.single_), chunks_(std::move(o.chunks_)),
      owner_one_at_(std::exchange(o.owner_one_at_, no_owner)), owner_one_(std::move(o.owner_one_)),
      owners_(std::move(o.owners_)), keep_first_(std::move(o.keep_first_)),
      keep_second_(std::move(o.keep_second_)), keep_alive_(std::move(o.keep_alive_)),
      types_(std::move(o.types_)), index_owner_(std::move(o.index_owner_)) {}

message& message::operator=(message&& o) noexcept {
    if (this != &o) {
        release_buffer();
        release_chunks();
        buffer_ = std::exchange(o.buffer_, nullptr);
        size_ = std::exchange(o.size_, 0);
        capacity_ = std::exchange(o.capacity_, 0);
        growth_copied_ = std::exchange(o.growth_copied_, 0);
        small_buffer_ = std::exchange(o.small_buffer_, false);
        borrowed_ = std::exchange(o.borrowed_, false);
        checked_ = std::exchange(o.checked_, false);
        checked_result_ = o.checked_result_;
        one_chunk_ = std::exchange(o.one_chunk_, false);
        refused_ = std::exchange(o.refused_, false);
        holds_refs_ = std::exchange(o.holds_refs_, false);
        single_ = o.single_;
        chunks_ = std::move(o.chunks_);
        owner_one_at_ = std::exchange(o.owner_one_at_, no_owner);
        owner_one_ = std::move(o.owner_one_);
        owners_ = std::move(o.owners_);
        keep_first_ = std::move(o.keep_first_);
        keep_second_ = std::move(o.keep_second_);
        keep_alive_ = std::move(o.keep_alive_);
        types_ = std::move(o.types_);
        index_owner_ = std::move(o.index_owner_);
    }
    return *this;
}

message::~message() {
    release_buffer();
    release_chunks();
}

std::size_t message::total_size() const noexcept {
    std::size_t n = size_;
    for (auto const& c : chunks()) {
        if (c.type != chunk_type::index) {
            n += c.size;
        }
    }
    return n;
}

std::size_t message::external_chunk_count() const noexcept {
    std::size_t n = 0;
    for (auto const& c : chunks()) {
        n += c.type != chunk_type::index;
    }
    return n;
}

void message::clear() noexcept {
    if (borrowed_) {
        release_buffer(); // a view's bytes are not this message's to write
    }
    checked_ = false;
    size_ = 0;
    growth_copied_ = 0;
    one_chunk_ = false;
    chunks_.clear();
    refused_ = false;
    if (holds_refs_) {
        owner_one_at_ = no_owner;
        owner_one_.reset();
        owners_.clear();
        keep_first_.reset();
        keep_second_.reset();
        keep_alive_.clear();
        types_.reset();
        holds_refs_ = false;
    }
}

void message::reserve(std::size_t bytes) {
    if (bytes > capacity_) {
        grow_to(bytes);
    }
}

namespace {
/// A block of exactly `n` bytes: from the small-object pool up to its largest size (`small`
/// set), else from malloc. Throws std::bad_alloc.
std::byte* exact_block(std::size_t n, bool& small) {
    small = n <= courier::detail::small_alloc_max;
    auto* p = static_cast<std::byte*>(small ? courier::detail::small_alloc(n) : std::malloc(n));
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    return p;
}
} // namespace

void message::shrink_to_fit() {
    if (buffer_ == nullptr || size_ == 0 || size_ > capacity_ / 2) {
        return;
    }
    bool small = false;
    std::byte* p = exact_block(size_, small);
    std::memcpy(p, buffer_, size_);
    release_buffer(); // back to the thread's cache when pooled
    buffer_ = p;
    capacity_ = size_;
    small_buffer_ = small;
}

void message::grow_to(std::size_t min_capacity) {
    if (borrowed_) { // a view: its bytes go to a buffer of its own, never written in place
        std::span<std::byte const> bytes = data();
        auto const keep = std::move(index_owner_); // alive until copied
        buffer_ = nullptr;
        capacity_ = 0;
        borrowed_ = false;
        grow_to(std::max(min_capacity, bytes.size()));
        if (!bytes.empty()) {
            std::memcpy(buffer_, bytes.data(), bytes.size());
        }
        return;
    }
    if (buffer_ != nullptr && min_capacity <= capacity_) {
        return; // large enough (the pooled path below would copy size_ bytes into less)
    }
    if (std::size_t cls = class_for(min_capacity); cls < buffer_classes) {
        min_capacity = class_capacity(cls); // what a pooled buffer of the class holds
        if (std::byte* b = take_buffer(cls)) {
            if (buffer_ != nullptr) {
                if (size_ != 0) {
                    std::memcpy(b, buffer_, size_);
                    growth_copied_ += size_;
                }
                release_buffer();
            }
            buffer_ = b;
            capacity_ = min_capacity;
            return;
        }
    }
    if (small_buffer_) { // not realloc's to move: copied out of the pool
        auto* p = static_cast<std::byte*>(std::malloc(min_capacity));
        if (p == nullptr) {
            throw std::bad_alloc();
        }
        std::memcpy(p, buffer_, size_);
        growth_copied_ += size_;
        courier::detail::small_free(buffer_, capacity_);
        small_buffer_ = false;
        buffer_ = p;
        capacity_ = min_capacity;
        return;
    }
    // realloc: for large buffers glibc moves pages (mremap) instead of copying bytes.
    void* p = std::realloc(buffer_, min_capacity);
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    if (p != buffer_) {
        growth_copied_ += size_;
    }
    buffer_ = static_cast<std::byte*>(p);
    capacity_ = min_capacity;
}

void message::keep_alive(std::shared_ptr<void const> ref) {
    if (!ref) {
        return;
    }
    holds_refs_ = true;
    if (!keep_first_) { // the usual one or two references need no vector storage
        keep_first_ = std::move(ref);
        return;
    }
    if (!keep_second_) {
        keep_second_ = std::move(ref);
        return;
    }
    keep_alive_.push_back(std::move(ref));
}

void message::set_chunk_owner(std::size_t i, std::shared_ptr<void const> owner) {
    std::size_t count = chunks().size();
    if (i >= count) {
        throw serialization_error("set_chunk_owner: chunk " + std::to_string(i) +
                                  " out of range (" + std::to_string(count) + " chunks)");
    }
    holds_refs_ = true;
    if (owners_.empty() && (owner_one_at_ == no_owner || owner_one_at_ == i)) {
        owner_one_at_ = i; // the usual single owner: no vector storage
        owner_one_ = std::move(owner);
        return;
    }
    if (owners_.size() != count) {
        owners_.resize(count);
    }
    if (owner_one_at_ != no_owner) {
        owners_[owner_one_at_] = std::move(owner_one_);
        owner_one_at_ = no_owner;
    }
    owners_[i] = std::move(owner);
}

std::shared_ptr<void const> const& message::chunk_owner(std::size_t i) const noexcept {
    static std::shared_ptr<void const> const none;
    if (i == owner_one_at_) {
        return owner_one_;
    }
    return i < owners_.size() ? owners_[i] : none;
}

message message::copy_index(std::span<std::byte const> data) {
    message m;
    if (data.size() <= pooled_capacity / 2) {
        // What shrink_to_fit() would leave: a small-object block of exactly the index's size,
        // not a pooled 4 KiB buffer (taken, copied into, then given back when the message is
        // queued).
        if (!data.empty()) {
            m.buffer_ = exact_block(data.size(), m.small_buffer_);
            m.capacity_ = data.size();
        }
    } else {
        m.grow_to(data.size()); // a pooled buffer up to 128 KiB
    }
    if (!data.empty()) {
        std::memcpy(m.buffer_, data.data(), data.size());
    }
    m.size_ = data.size();
    return m;
}

message message::from_parts(std::span<std::byte const> data,
                            std::vector<serialization_chunk> chunks) {
    message m = copy_index(data);
    m.chunks_ = std::move(chunks);
    m.validate();
    return m;
}

message message::with_index_buffer(std::size_t index_size) {
    message m;
    m.grow_to(index_size); // a pooled buffer up to 128 KiB
    m.size_ = index_size;
    return m;
}

void message::complete_parts(std::vector<serialization_chunk> chunks) {
    checked_ = false;
    one_chunk_ = false;
    chunks_ = std::move(chunks);
    owner_one_at_ = no_owner;
    owner_one_.reset();
    owners_.clear();
    validate();
}

message message::shared_index(std::span<std::byte const> data) {
    message m;
    // A reference-counted block that a loader adopting a block of it shares (a received
    // serialize_buffer costs no second copy), pooled (no allocation in the steady state):
    // up to the small-object pool's largest, one block with its count (allocate_shared);
    // beyond, a pooled message buffer with its count in a small-object block, given back
    // to the buffer pool when the last holder lets go (with the second way at every size,
    // posts of 16 KiB on tcp ran at 0.93x, 8 of 9 rounds behind).
    constexpr std::size_t count_room = 64; // allocate_shared's count, with room to spare
    std::shared_ptr<std::byte> block;
    if (data.size() + count_room <= courier::detail::small_alloc_max) {
        auto one = std::allocate_shared_for_overwrite<std::byte[]>(
            courier::detail::pool_allocator<std::byte>{}, data.size());
        block = std::shared_ptr<std::byte>(one, one.get());
    } else {
        std::size_t const cls = class_for(data.size());
        std::size_t const capacity = cls < buffer_classes ? class_capacity(cls) : data.size();
        std::byte* b = cls < buffer_classes ? take_buffer(cls) : nullptr;
        if (b == nullptr) {
            b = static_cast<std::byte*>(std::malloc(capacity));
            if (b == nullptr) {
                throw std::bad_alloc();
            }
        }
        block = std::shared_ptr<std::byte>(
            b, [capacity](std::byte* x) { give_back(x, capacity); },
            courier::detail::pool_allocator<std::byte>{}); // on failure, b is given back
    }
    std::memcpy(block.get(), data.data(), data.size());
    m.buffer_ = block.get();
    m.size_ = data.size();
    m.capacity_ = data.size();
    m.borrowed_ = true; // never written in place: a loader may share it
    m.index_owner_ = std::move(block);
    return m;
}

message message::from_bytes(std::span<std::byte const> data) {
    // Made in place either way (a message's move assignment costs ~160 instructions).
    message m = data.size() >= shareable_index_min ? shared_index(data) : copy_index(data);
    if (!data.empty()) {
        m.add_chunk({chunk_type::index, data.size(), 0, nullptr, 0}); // inline: no vector
    }
    m.validate();
    return m;
}

void message::view(std::span<std::byte const> data) {
    if (!borrowed_ || index_owner_) {
        // It owns something (or nothing yet): freed. A view stays one until a writer makes it
        // own its bytes (grow_to, clear), and only view() changes its chunk list.
        *this = message();
    }
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): never written (grow_to copies)
    buffer_ = const_cast<std::byte*>(data.data());
    size_ = data.size();
    capacity_ = data.size();
    borrowed_ = buffer_ != nullptr;
    growth_copied_ = 0;
    checked_ = false;
    one_chunk_ = !data.empty();
    single_ = {chunk_type::index, data.size(), 0, nullptr, 0};
}

void message::add_listed_chunk(serialization_chunk const& c) {
    if (one_chunk_) { // a second chunk: both go to the vector
        if (chunks_.capacity() == 0) {
            chunks_ = chunk_list();
        }
        chunks_.push_back(single_);
        one_chunk_ = false;
    }
    chunks_.push_back(c);
}

namespace {
std::string hex(std::uint8_t b) {
    char s[8];
    std::snprintf(s, sizeof s, "0x%02x", b);
    return s;
}
} // namespace

namespace {
/// The threshold recorded in the 8-byte header at `header` (SIZE_MAX: zero copy off).
std::size_t threshold_in(std::byte const* header) {
    std::uint32_t t;
    std::memcpy(&t, header + 4, 4);
    if constexpr (std::endian::native == std::endian::big) {
        t = __builtin_bswap32(t);
    }
    if (t == threshold_zero_copy_off) {
        return std::numeric_limits<std::size_t>::max();
    }
    if (t == 0) {
        throw serialization_error("message header: zero-copy threshold 0 is invalid");
    }
    return t;
}

[[noreturn]] void throw_short(std::size_t size) {
    throw serialization_error("message of " + std::to_string(size) +
                              " bytes is shorter than its 8-byte header");
}
} // namespace

std::size_t message::recorded_threshold() const {
    if (size_ < message_header_size) {
        throw_short(size_);
    }
    return threshold_in(buffer_);
}

namespace {
/// The first four header bytes this host writes and reads: magic, version, byte order, flags.
constexpr std::uint8_t our_header[4] = {'C', 'R', message_format_version,
                                        std::endian::native == std::endian::big ? 1 : 0};

/// Throws the error that describes a header whose first four bytes are not ours.
[[noreturn]] void bad_header(std::byte const* buffer) {
    auto b = [&](int i) { return static_cast<std::uint8_t>(buffer[i]); };
    if (b(0) != 'C' || b(1) != 'R') {
        throw serialization_error("bad message magic: expected 'C' 'R' (0x43 0x52), found " +
                                  hex(b(0)) + " " + hex(b(1)));
    }
    if (b(2) != message_format_version) {
        throw serialization_error("unsupported message format version " + std::to_string(b(2)) +
                                  " (this build reads version " +
                                  std::to_string(message_format_version) + ")");
    }
    std::uint8_t const ours = std::endian::native == std::endian::big ? 1 : 0;
    if ((b(3) & ~1u) != 0) {
        throw serialization_error("message header: unknown flags " + hex(b(3)));
    }
    throw serialization_error(std::string("message was written by a ") +
                              ((b(3) & 1u) ? "big" : "little") + "-endian host; this host is " +
                              (ours ? "big" : "little") +
                              "-endian and Courier does not convert byte order");
}
} // namespace

message::check_result message::check() const {
    if (checked_) {
        return checked_result_;
    }
    check_result result{header_threshold(data()), 0};
    std::size_t expected_offset = 0;
    auto const list = chunks();
    for (std::size_t i = 0; i < list.size(); ++i) {
        auto const& c = list[i];
        switch (c.type) {
        case chunk_type::index:
            if (c.offset != expected_offset || c.size > size_ - expected_offset || c.size == 0) {
                throw serialization_error(
                    "chunk " + std::to_string(i) + ": index chunk [" + std::to_string(c.offset) +
                    ", +" + std::to_string(c.size) + ") does not continue the index buffer at " +
                    std::to_string(expected_offset) + " of " + std::to_string(size_) + " bytes");
            }
            expected_offset += c.size;
            break;
        case chunk_type::pointer:
        case chunk_type::rma:
            if (c.size != 0 && c.address == nullptr && !refused_) {
                throw serialization_error("chunk " + std::to_string(i) + ": " +
                                          std::to_string(c.size) + "-byte chunk has no address");
            }
            result.external_bytes += c.size;
            break;
        default:
            throw serialization_error("chunk " + std::to_string(i) + ": unknown chunk type " +
                                      std::to_string(static_cast<int>(c.type)));
        }
    }
    if (expected_offset != size_) {
        throw serialization_error("index chunks cover " + std::to_string(expected_offset) +
                                  " of the " + std::to_string(size_) + "-byte index buffer");
    }
    checked_result_ = result;
    checked_ = true;
    return result;
}

std::size_t message::header_threshold(std::span<std::byte const> stream) {
    if (stream.size() < message_header_size) {
        throw_short(stream.size());
    }
    // One 32-bit compare for magic, version, byte order and flags.
    if (std::memcmp(stream.data(), our_header, sizeof our_header) != 0) [[unlikely]] {
        bad_header(stream.data());
    }
    return threshold_in(stream.data());
}

} // namespace courier::serialization
