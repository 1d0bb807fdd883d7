// SPDX-License-Identifier: BSL-1.0
// The rendezvous's read budget (rendezvous.hpp): admitting parcels, deferring them while the
// reads in flight use it up, giving it back, and releasing the budget of stalled reads.
#include "rendezvous.hpp"

#include <algorithm>
#include <courier/common/log.hpp>
#include <courier/serialization/chunk.hpp>

#include <cstring>

namespace courier::parcelport::fabric {

namespace {
/// Bytes the descriptors at `p` (n_desc of them; the one at `chunk_count`, if any, is the
/// non-inline index) have the receiver read: pointer/rma chunks and a non-inline index.
std::size_t bytes_to_read(std::byte const* p, std::size_t n_desc, std::uint32_t chunk_count) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n_desc; ++i) {
        wire::descriptor d;
        std::memcpy(&d, p + i * sizeof d, sizeof d);
        if (i == chunk_count ||
            d.type != static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            total += static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
        }
    }
    return total;
}
} // namespace

std::size_t rendezvous_bytes(wire::header const& h, std::byte const* p, std::size_t len) {
    if ((h.flags & wire::descriptors_remote) != 0) {
        if (len < sizeof h + sizeof(wire::descriptor)) {
            return 0;
        }
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h, sizeof d);
        return static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
    }
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::size_t n_desc = std::size_t{h.chunk_count} + (index_inline ? 0 : 1);
    if (n_desc > (len - sizeof h) / sizeof(wire::descriptor)) {
        return 0;
    }
    return bytes_to_read(p + sizeof h, n_desc, h.chunk_count);
}

std::size_t descriptor_payload(std::vector<std::byte> const& table, std::uint32_t chunk_count) {
    return bytes_to_read(table.data(), table.size() / sizeof(wire::descriptor), chunk_count);
}

bool rendezvous::must_wait(std::size_t rma_bytes) {
    std::size_t used = reading_bytes_ + landed_in_pass_.load(std::memory_order_relaxed);
    if (used == 0 || used + rma_bytes <= opts_.read_budget) {
        return false;
    }
    if (reading_bytes_ == 0) { // no read will release budget: the next pass admits it
        admit_pending_.store(true, std::memory_order_release);
    }
    return true;
}

void rendezvous::admit(wire::header const& h, std::byte const* p, std::size_t len,
                       std::size_t rma_bytes) {
    if (rma_bytes != 0) {
        std::lock_guard g(mutex_);
        if (must_wait(rma_bytes)) {
            deferred_.push(h, p, len, rma_bytes);
            ++parts_.stats.deferred_rendezvous;
            publish_busy();
            return;
        }
        reading_bytes_ += rma_bytes;
        publish_busy();
    }
    try {
        start(h, p, len, rma_bytes);
    } catch (...) {
        release_budget(rma_bytes);
        throw;
    }
}

void rendezvous::release_budget(std::size_t bytes, bool landed) {
    if (bytes == 0) {
        return;
    }
    std::lock_guard g(mutex_);
    reading_bytes_ -= bytes;
    publish_busy();
    if (landed) {
        landed_in_pass_.store(landed_in_pass_.load(std::memory_order_relaxed) + bytes,
                              std::memory_order_relaxed);
    }
    if (!deferred_.empty()) {
        admit_pending_.store(true, std::memory_order_release);
    }
}

bool rendezvous::admit_deferred() {
    if (landed_in_pass_.load(std::memory_order_relaxed) != 0) {
        // A new pass: with one worker, the tasks of the last one's parcels have run since (with
        // more, another worker's pass may come first: that costs cache, not correctness).
        std::lock_guard g(mutex_);
        landed_in_pass_.store(0, std::memory_order_relaxed);
    }
    if (!admit_pending_.load(std::memory_order_relaxed) ||
        !admit_pending_.exchange(false, std::memory_order_acq_rel)) {
        return false;
    }
    bool any = false;
    deferred_parcel& next = admitting_;
    for (;;) {
        {
            std::lock_guard g(mutex_);
            if (deferred_.empty() || must_wait(deferred_.front().rma_bytes)) {
                return any;
            }
            deferred_.pop_into(next);
            reading_bytes_ += next.rma_bytes;
            publish_busy();
        }
        any = true;
        try {
            start(next.h, next.eager.data(), next.eager.size(), next.rma_bytes);
        } catch (std::exception const& e) {
            static logging::rate_limit limit;
            logging::error_limited(limit, "dropped a malformed parcel from locality {}: {}",
                                   next.h.source, e.what());
            std::lock_guard g(mutex_);
            reading_bytes_ -= next.rma_bytes; // give it back and try the next one
            publish_busy();
        }
    }
}

void rendezvous::deferred_queue::push(wire::header const& h, std::byte const* p, std::size_t len,
                                      std::size_t rma) {
    if (count_ == slots_.size() && head_ != 0) { // the spare slots in front move to the back
        std::rotate(slots_.begin(), slots_.begin() + static_cast<std::ptrdiff_t>(head_),
                    slots_.end());
        count_ -= head_;
        head_ = 0;
    }
    if (count_ == slots_.size()) {
        slots_.emplace_back();
    }
    deferred_parcel& d = slots_[count_];
    d.eager.assign(p, p + len); // into the storage of a copy admitted before, if it fits
    d.h = h;
    d.rma_bytes = rma;
    ++count_;
}

void rendezvous::deferred_queue::pop_into(deferred_parcel& to) noexcept {
    deferred_parcel& d = slots_[head_];
    to.h = d.h;
    to.rma_bytes = d.rma_bytes;
    if (to.eager.capacity() > max_kept_copy) {
        to.eager = {}; // an unusually large copy's storage is not kept
    }
    to.eager.swap(d.eager); // the slot keeps the storage of the copy `to` held before
    if (++head_ == count_) {
        head_ = count_ = 0; // every slot spare
        if (slots_.size() > max_slots) {
            slots_.resize(max_slots); // a flood's slots are freed
        }
    }
}

void rendezvous::release_stalled() {
    if (opts_.read_stall_timeout.count() <= 0) {
        return;
    }
    auto now = std::chrono::steady_clock::now();
    std::size_t freed = 0;
    std::vector<std::uint32_t> sources;
    {
        std::lock_guard g(mutex_);
        for (auto& [p, in] : incoming_) {
            if (in->outstanding != 0 && in->rma_bytes != 0 &&
                now - in->moved > opts_.read_stall_timeout) {
                freed += in->rma_bytes;
                in->rma_bytes = 0; // finish() then releases nothing
                sources.push_back(in->source);
                ++parts_.stats.stalled_reads;
            }
        }
    }
    for (auto s : sources) {
        logging::error("RMA reads from locality {} stalled for over {} ms; their read budget is "
                       "released (the parcel stays pending until they complete)",
                       s, opts_.read_stall_timeout.count());
    }
    release_budget(freed);
}

void rendezvous::publish_busy() noexcept {
    busy_.store(reading_bytes_ != 0 || !deferred_.empty(), std::memory_order_release);
}

std::string rendezvous::debug_state() const {
    std::lock_guard g(mutex_);
    std::size_t reads = 0;
    for (auto const& [p, in] : incoming_) {
        reads += in->outstanding;
    }
    return fmt::format("incoming rendezvous {} (reads outstanding {}), waiting for the read "
                       "budget {}",
                       incoming_.size(), reads, deferred_.size());
}

} // namespace courier::parcelport::fabric
