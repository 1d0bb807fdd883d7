// SPDX-License-Identifier: BSL-1.0
// progress(): the completion queue, read by one thread at a time, each entry dispatched to the
// object that posted it (op::kind); then the periodic checks, open batches and the backlog.
#include "libfabric_transport.hpp"

#include <courier/common/log.hpp>
#include <courier/common/single_writer.hpp>

#include <algorithm>

namespace courier::parcelport::fabric {

bool libfabric_transport::first_error(std::size_t peer) {
    if (errors_.size() < peers_.size() + 2) {
        errors_.resize(peers_.size() + 2, 0);
    }
    return errors_[std::min(peer, errors_.size() - 2)]++ == 0;
}

void libfabric_transport::on_error_entry() {
    fi_cq_err_entry err{};
    fi_cq_readerr(endpoint_->cq(), &err, 0);
    auto* o = static_cast<op*>(err.op_context);
    auto ec = std::make_error_code(std::errc::connection_reset);
    auto what = [&] {
        return fi_cq_strerror(endpoint_->cq(), err.prov_errno, err.err_data, nullptr, 0);
    };
    if (o == nullptr) {
        // libfabric 1.17's shm reports a failed fi_read without its context: such an error
        // cannot be tied to a parcel, whose reads then never complete. The stall timeout
        // returns their read budget.
        if (first_error(peers_.size())) {
            logging::error("libfabric completion error: {} (the provider did not say which "
                           "operation; more such errors are counted, not logged)",
                           what());
        }
        return;
    }
    std::size_t peer = peers_.size();
    switch (o->k) {
    case op::kind::send:
        peer = static_cast<send_op*>(o)->s->dest;
        break;
    case op::kind::batch:
        peer = static_cast<batch_op*>(o)->dest;
        break;
    case op::kind::batch_part:
        peer = static_cast<batch_part_op*>(o)->b->dest;
        break;
    case op::kind::ring_lone:
        peer = static_cast<ring_lone_op*>(o)->dest;
        break;
    case op::kind::read:
        peer = static_cast<read_op*>(o)->in->source;
        break;
    case op::kind::recv:
    case op::kind::push:
        peer = peers_.size() + 1;
        break;
    }
    if (first_error(peer)) {
        if (o->k == op::kind::recv || o->k == op::kind::push) {
            logging::warn("a receive failed: {} (more failed receives are counted, not logged)",
                          what());
        } else {
            logging::debug("libfabric completion error with locality {}: {} (more errors with it "
                           "are counted, not logged)",
                           peer, what());
        }
    }
    switch (o->k) {
    case op::kind::send:
        sender_->on_completion(static_cast<send_op*>(o), true);
        break;
    case op::kind::batch:
        coalescer_->on_completion(static_cast<batch_op*>(o), ec);
        break;
    case op::kind::batch_part:
        coalescer_->on_completion(static_cast<batch_part_op*>(o)->b, ec);
        break;
    case op::kind::ring_lone:
        // Never from the provider (only local completions list it): counted as ended all the same.
        coalescer_->on_ring_lone(static_cast<ring_lone_op*>(o));
        break;
    case op::kind::read:
        rendezvous_->on_completion(static_cast<read_op*>(o), true, what());
        break;
    case op::kind::recv:
        // A receive that failed (a message larger than the buffer, a provider error): the
        // buffer is free again and goes back, so that the posted receives do not dwindle.
        receiver_->repost(static_cast<recv_op*>(o));
        break;
    case op::kind::push:
        // A pushed message larger than its class (net truncates it: never from this code), or
        // a provider error: nothing of it is delivered, and the same buffer is posted again.
        // It ended all the same (its sender's push notice counts it landed).
        peers_.push_landed();
        receiver_->repost_push(static_cast<push_op*>(o));
        break;
    }
}

void libfabric_transport::log_error_summary() {
    for (std::size_t i = 0; i < errors_.size(); ++i) {
        if (errors_[i] < 2) {
            continue;
        }
        auto more = errors_[i] - 1;
        if (i < peers_.size()) {
            logging::debug("{} more libfabric completion errors with locality {} were not logged",
                           more, i);
        } else if (i == peers_.size()) {
            logging::error("{} more libfabric completion errors of unnamed operations were not "
                           "logged",
                           more);
        } else {
            logging::warn("{} more failed receives were not logged", more);
        }
    }
}

void libfabric_transport::on_success(op* o, std::size_t len) {
    switch (o->k) {
    case op::kind::recv:
        receiver_->on_completion(static_cast<recv_op*>(o), len);
        break;
    case op::kind::send:
        sender_->on_completion(static_cast<send_op*>(o), false);
        break;
    case op::kind::read:
        rendezvous_->on_completion(static_cast<read_op*>(o), false);
        break;
    case op::kind::batch:
        coalescer_->on_completion(static_cast<batch_op*>(o), {});
        break;
    case op::kind::batch_part:
        coalescer_->on_completion(static_cast<batch_part_op*>(o)->b, {});
        break;
    case op::kind::ring_lone:
        coalescer_->on_ring_lone(static_cast<ring_lone_op*>(o));
        break;
    case op::kind::push:
        receiver_->on_pushed(static_cast<push_op*>(o), len);
        break;
    }
}

bool libfabric_transport::read_completion_queue() {
    // One writer: the poller, under the poll lock (a locked addition here cost every pass).
    courier::detail::add_single_writer(counters_.completion_queue_reads);
    bool found = false;
    fi_cq_msg_entry entries[16];
    for (;;) {
        ssize_t n = fi_cq_read(endpoint_->cq(), entries, 16);
        if (n == -FI_EAGAIN) {
            break;
        }
        if (n == -FI_EAVAIL) {
            ++tally_.events;
            on_error_entry();
            found = true;
            continue;
        }
        if (n < 0) {
            throw error_of("fi_cq_read", n);
        }
        found = true;
        tally_.events += static_cast<std::uint32_t>(n);
        for (ssize_t i = 0; i < n; ++i) {
            on_success(static_cast<op*>(entries[i].op_context), entries[i].len);
        }
        if (n < 16) {
            // A partial batch: the queue was empty a moment ago. Another fi_cq_read now would
            // cost a provider progress pass (an epoll_wait on tcp) for nothing; the caller
            // comes back soon.
            break;
        }
    }
    return found;
}

bool libfabric_transport::progress() {
    // One poller at a time (others have nothing to add and would only contend on the CQ;
    // libfabric 1.17's tcp/rxm also crashed with concurrent fi_cq_read and fi_trywait).
    std::unique_lock poll_lock(poll_mutex_, std::try_to_lock);
    if (!poll_lock) {
        return false;
    }
    bool const any = pass(false);
    if (any && net_bell_) {
        net_bell_->heard();
    }
    return any;
}

bool libfabric_transport::pass(bool read_queue) {
    tally_ = {};
    bool any = false;
    bool other = false; // work that is no message or completion
    try {
        other = rendezvous_->admit_deferred();
        other = rendezvous_->advance_direct() || other;
        any = other;
        if (rings_) {
            // Sends that went through the rings complete first: their parcels' handlers may
            // free what the next messages need. Then the messages waiting in the rings.
            any = local_.drain([this](op* o) {
                ++tally_.events;
                on_success(o, 0);
            }) || any;
            any = rings_->poll([this](std::uint32_t source, std::byte const* p, std::size_t len) {
                ++tally_.events;
                receiver_->on_ring_message(source, p, len);
            }) || any;
        }
        // shm whose every peer writes to this side through a message ring: the provider's
        // queue then holds this side's own provider operations and the rare message no ring
        // took (too large, or the ring full), so it is read on every pass only while hot
        // (this side posted to the provider, a rendezvous of its own or of a peer's is under
        // way, or the last read found something, within the last `hot_passes`), and every
        // eighth pass otherwise. A read there (its locks, the shm provider's progress) was
        // about a third of an idle pass.
        bool read = true;
        if (!read_queue && gated()) {
            if (backlog_.take_posted() || sender_->awaiting_done() || rendezvous_->busy()) {
                cq_hot_ = hot_passes;
            }
            read = cq_hot_ > 0 || (progress_calls_ & 7) == 0;
        }
        // A quiet network rail beside shm reads its queue only now and then (poll_pacer.hpp),
        // but on every pass while a rendezvous is under way: its bytes move only then, and no
        // completion marks their progress. (An eager send kicks the pacer itself.) The look
        // before a sleep reads it whatever the pacer says.
        std::int64_t const now = pacer_.enabled() ? poll_pacer::now() : 0;
        if (read && (read_queue || pacer_.due(now, [this] {
                return sender_->awaiting_done() || rendezvous_->busy();
            }))) {
            bool const found = read_completion_queue();
            std::int64_t const cost = pacer_.quiet(now) ? poll_pacer::now() - now : 0;
            pacer_.polled(now, found, cost);
            if (found) {
                cq_hot_ = hot_passes;
            } else if (cq_hot_ > 0) {
                --cq_hot_;
            }
            any = found || any;
        }
    } catch (...) {
        // A failed pass (fi_cq_read's error, a handler's) still sends the DONEs it queued, as
        // messages: no flush of the batches follows.
        sender_->flush_dones(false);
        throw;
    }
    if ((++progress_calls_ & 255) == 0) {
        rendezvous_->release_stalled();
        receiver_->housekeeping();
    }
    // The DONEs of the parcels this pass finished, one message per sender.
    other = sender_->flush_dones() || other;
    // Coalesced parcels wait at most until here (the message before them has had the time this
    // pass took to complete; if it has not, the batch follows it anyway).
    other = coalescer_->flush() || other;
    // Retry what -FI_EAGAIN deferred, in order (the empty case costs one atomic load).
    other = backlog_.retry() || other;
    // Only control messages arrived or ended (send_control: liveness beats): nothing for the
    // caller to do, and no conversation to stay awake for.
    if (!other && tally_.quiet != 0 && tally_.quiet == tally_.events) {
        return false;
    }
    return any || other;
}

} // namespace courier::parcelport::fabric
