// SPDX-License-Identifier: BSL-1.0
#include <courier/serialization/detail/tracking.hpp>
#include <courier/serialization/detail/varint.hpp>
#include <courier/serialization/input_archive.hpp>
#include <courier/serialization/polymorphic.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <vector>

namespace courier::serialization {

struct input_archive::deep_state {
    struct allocation {
        void* p;
        std::size_t bytes;
        void (*destroy)(void*);
        std::size_t first_slot; // slots recorded from here on may lie inside it
    };
    struct slot {
        void* at;
        void (*reset)(void*);
    };
    std::vector<allocation> allocations;
    std::vector<slot> slots;
    std::size_t count = 0, bytes = 0;
};

input_archive::deep_state& input_archive::deep() {
    if (!deep_) {
        deep_ = std::make_unique<deep_state>();
        note_uncaught();
    }
    return *deep_;
}

void input_archive::count_deep_allocation(std::size_t bytes) {
    auto& d = deep();
    if (++d.count > limits_.max_deep_allocations) {
        fail("deep copy: more than " + std::to_string(limits_.max_deep_allocations) +
             " nodes and arrays in one load (load_limits::max_deep_allocations)");
    }
    if (bytes > limits_.max_deep_bytes - std::min(d.bytes, limits_.max_deep_bytes)) {
        fail("deep copy: more than " + std::to_string(limits_.max_deep_bytes) +
             " bytes allocated in one load (load_limits::max_deep_bytes)");
    }
    d.bytes += bytes;
}

std::size_t input_archive::register_allocation(void* p, std::size_t bytes, void (*destroy)(void*)) {
    auto& d = deep();
    std::size_t id = d.allocations.size();
    d.allocations.push_back({p, bytes, destroy, d.slots.size()});
    return id;
}

void input_archive::release_allocation(std::size_t id) noexcept {
    auto& d = *deep_;
    auto& a = d.allocations[id];
    auto start = reinterpret_cast<std::uintptr_t>(a.p);
    auto end = start + a.bytes;
    // Pointers recorded inside it now belong to its new owner too.
    auto first =
        d.slots.begin() + static_cast<std::ptrdiff_t>(std::min(a.first_slot, d.slots.size()));
    d.slots.erase(std::remove_if(first, d.slots.end(),
                                 [&](deep_state::slot const& s) {
                                     auto at = reinterpret_cast<std::uintptr_t>(s.at);
                                     return at >= start && at < end;
                                 }),
                  d.slots.end());
    a.destroy = nullptr;
}

bool input_archive::record_slot(void* slot, bool top_level, void (*reset)(void*)) {
    auto at = reinterpret_cast<std::uintptr_t>(slot);
    auto top = reinterpret_cast<std::uintptr_t>(top_level_);
    bool keep = top_level || (top_level_ != nullptr && at >= top && at < top + top_level_size_);
    // Inside the node or array being loaded (allocations of this load: their addresses are
    // stable), innermost first.
    for (auto it = stable_.rbegin(); !keep && it != stable_.rend(); ++it) {
        keep = at >= it->first && at < it->second;
    }
    if (keep) {
        deep().slots.push_back({slot, reset});
    }
    return keep;
}

void input_archive::defer_node(void* node, std::size_t bytes, node_loader loader) {
    deferred_.push({node, bytes, loader}, [this](deferred_node const& d) {
        begin_stable_range(d.node, d.bytes); // pointers assigned inside the node are recorded
        try {
            d.load(*this, d.node);
        } catch (...) {
            end_stable_range();
            throw;
        }
        end_stable_range();
    });
}

void input_archive::rollback() noexcept {
    if (tracking_) {
        tracking_->clear_owned();
    }
    if (!deep_) {
        return;
    }
    auto& d = *deep_;
    for (auto it = d.slots.rbegin(); it != d.slots.rend(); ++it) {
        it->reset(it->at);
    }
    d.slots.clear();
    for (auto it = d.allocations.rbegin(); it != d.allocations.rend(); ++it) {
        if (it->destroy != nullptr) {
            it->destroy(it->p);
        }
    }
    d.allocations.clear();
}

input_archive::input_archive(message const& m, load_limits const& limits)
    : msg_(m), limits_(limits) {
    max_empty_elements_ = limits.max_empty_elements;
    auto checked = m.check();
    threshold_ = checked.threshold;
    external_remaining_ = checked.external_bytes;
    begin_ = m.data().data();
    cur_ = begin_ + message_header_size;
    end_ = begin_ + m.index_size();
    if (m.type_table()) {
        types_ = std::make_unique<detail::type_resolver>(*m.type_table());
    }
}

void input_archive::fail_not_in_table(char const* name) const {
    fail("the checkpoint's type table does not list " + detail::demangle(name) +
         " (was the type renamed or moved to another namespace?)");
}

input_archive::~input_archive() {
    if ((deep_ || tracking_) && std::uncaught_exceptions() > uncaught_) {
        rollback();
    }
}

namespace detail {

void index_reader::fail(std::string const& what) const {
    throw serialization_error("courier::serialization: " + what + " (at index byte " +
                              std::to_string(position()) + " of " + std::to_string(end_ - begin_) +
                              ")");
}

void index_reader::throw_truncated(std::size_t n) const {
    fail("truncated archive: needed " + std::to_string(n) + " bytes, " +
         std::to_string(end_ - cur_) + " remain");
}

void index_reader::fail_trailing() const {
    fail("trailing garbage: " + std::to_string(end_ - cur_) + " index bytes left unread");
}

void index_reader::fail_no_chunk(std::size_t n) const {
    fail("expected a pointer or rma chunk of " + std::to_string(n) +
         " bytes, but the message has no more");
}

std::uint64_t index_reader::load_size_slow() {
    std::uint64_t v = 0;
    switch (decode_varint(cur_, end_, v)) {
    case varint_read::ok:
        return v;
    case varint_read::truncated:
        throw_truncated(1);
    case varint_read::overflow:
        break;
    }
    fail("varint overflows 64 bits");
}

void index_reader::check_count(std::uint64_t n, std::size_t min_element_bytes) {
    std::size_t const left = remaining();
    bool const ok =
        min_element_bytes == 0 ? n <= left + max_empty_elements_ : n <= left / min_element_bytes;
    if (!ok) {
        fail("element count " + std::to_string(n) + " cannot fit: " + std::to_string(left) +
             " bytes remain" +
             (min_element_bytes
                  ? " and each element needs at least " + std::to_string(min_element_bytes)
                  : std::string()));
    }
}

} // namespace detail

std::size_t input_archive::next_external_chunk(std::size_t n) {
    auto chunks = msg_.chunks();
    while (next_chunk_ < chunks.size() && chunks[next_chunk_].type == chunk_type::index) {
        ++next_chunk_;
    }
    if (next_chunk_ == chunks.size()) {
        fail_no_chunk(n);
    }
    auto const& c = chunks[next_chunk_];
    if (c.size != n) {
        fail("expected a " + std::to_string(n) + "-byte chunk, found chunk " +
             std::to_string(next_chunk_) + " of " + std::to_string(c.size) + " bytes");
    }
    if (c.address == nullptr && n != 0) { // validate() let it pass: a refused chunk
        auto const* why = msg_.refused()
                              ? static_cast<std::string const*>(msg_.chunk_owner(next_chunk_).get())
                              : nullptr;
        fail("chunk " + std::to_string(next_chunk_) + " (" + std::to_string(n) +
             " bytes) was not received: " + (why != nullptr ? *why : "it has no address"));
    }
    external_remaining_ -= n;
    return next_chunk_++;
}

void input_archive::load_block_slow(void* p, std::size_t n) {
    if (n >= threshold_) {
        auto const& c = msg_.chunks()[next_external_chunk(n)];
        std::memcpy(p, c.address, n);
    } else if (n != 0) {
        load_bytes(p, n);
    }
}

void input_archive::load_external_block(void* p, std::size_t n) {
    auto const& c = msg_.chunks()[next_external_chunk(n)];
    if (n != 0) {
        std::memcpy(p, c.address, n);
    }
}

input_archive::block input_archive::take_block(std::size_t n) {
    if (n >= threshold_) {
        std::size_t i = next_external_chunk(n);
        auto const& c = msg_.chunks()[i];
        auto const& owner = msg_.chunk_owner(i);
        return {c.address, n, c.type, c.rkey, owner ? &owner : nullptr};
    }
    if (n > static_cast<std::size_t>(end_ - cur_)) {
        throw_truncated(n);
    }
    block b{cur_, n, chunk_type::index, 0, nullptr};
    if (n >= message::shareable_index_min && n >= msg_.index_size() / 2 && msg_.index_owner()) {
        b.owner = &msg_.index_owner(); // a large part of a shared index (message::from_bytes)
    }
    cur_ += n;
    return b;
}

void input_archive::finish() const {
    check_index_consumed();
    if (external_remaining_ != 0) {
        fail("trailing chunks: " + std::to_string(external_remaining_) +
             " bytes of pointer/rma chunks left unread");
    }
    for (std::size_t i = next_chunk_; i < msg_.chunks().size(); ++i) {
        if (msg_.chunks()[i].type != chunk_type::index) {
            fail("trailing chunks: chunk " + std::to_string(i) + " was never read");
        }
    }
}

detail::load_tracking& input_archive::tracking() {
    if (!tracking_) {
        tracking_ = std::make_unique<detail::load_tracking>();
        note_uncaught();
    }
    return *tracking_;
}

} // namespace courier::serialization
