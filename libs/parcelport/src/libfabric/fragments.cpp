// SPDX-License-Identifier: BSL-1.0
// Joining the two parts of split messages (fragments.hpp).
#include "fragments.hpp"

#include "eager_reader.hpp"

#include <courier/common/log.hpp>

#include <algorithm>
#include <cstring>

namespace courier::parcelport::fabric {

bool fragment_joiner::add(recv_op* r, wire::header const& h, std::size_t len) {
    std::size_t part_len = len - sizeof h;
    std::uint32_t part = h.chunk_count;
    std::size_t room = reader_.buffer_size() - sizeof h;
    if (part > 1 || part_len == 0 || h.index_size > room || part_len >= h.index_size) {
        static logging::rate_limit limit;
        logging::error_limited(
            limit,
            "dropped a malformed part of a split message from locality {} (part {} of {} "
            "bytes, {} in all)",
            h.source, part, part_len, h.index_size);
        return false;
    }
    auto w = std::find_if(waits_.begin(), waits_.end(), [&](waiting const& f) {
        return f.source == h.source && f.id == h.send_id;
    });
    if (w == waits_.end()) {
        if (waits_.size() >= max_fragment_waits) {
            drop(waits_.front(), fmt::format("its other part has not come while {} others waited",
                                             max_fragment_waits));
            waits_.erase(waits_.begin());
        }
        waiting f;
        f.source = h.source;
        f.id = h.send_id;
        f.total = h.index_size;
        f.since = std::chrono::steady_clock::now();
        if (part == 0) {
            f.head = r;
            f.head_len = part_len;
        } else {
            auto const* p = r->buf.get() + sizeof h;
            f.tail.assign(p, p + part_len);
        }
        waits_.push_back(std::move(f));
        return part == 0;
    }
    // The other part's bytes (none if this part came twice: the sum then fails, as part_len
    // is less than the whole).
    std::size_t have = part == 0 ? w->tail.size() : w->head_len;
    if (w->total != h.index_size || have + part_len != h.index_size) {
        drop(*w, fmt::format("its parts do not match (part {} of {} bytes, {} in all; {} bytes "
                             "before)",
                             part, part_len, h.index_size, have));
        waits_.erase(w);
        return false;
    }
    recv_op* head = part == 0 ? r : w->head;
    std::byte* msg = head->buf.get() + sizeof h;
    if (part == 0) {
        std::memcpy(msg + part_len, w->tail.data(), w->tail.size());
    } else {
        std::memcpy(msg + w->head_len, r->buf.get() + sizeof h, part_len);
    }
    std::size_t total = h.index_size;
    waits_.erase(w);
    reader_.handle_message(msg, total);
    if (part == 1) {
        reader_.release(head); // r, part 1's buffer, is re-posted by the caller
    }
    return false;
}

void fragment_joiner::drop_stale() {
    if (waits_.empty() || stall_timeout_.count() <= 0) {
        return;
    }
    auto now = std::chrono::steady_clock::now();
    std::erase_if(waits_, [&](waiting const& f) {
        if (now - f.since <= stall_timeout_) {
            return false;
        }
        drop(f, fmt::format("its other part has not come within {} ms", stall_timeout_.count()));
        return true;
    });
}

void fragment_joiner::drop(waiting const& w, std::string const& why) {
    static logging::rate_limit limit;
    logging::error_limited(limit, "dropped a split message from locality {}: {}", w.source, why);
    if (w.head != nullptr) {
        reader_.release(w.head);
    }
}

} // namespace courier::parcelport::fabric
