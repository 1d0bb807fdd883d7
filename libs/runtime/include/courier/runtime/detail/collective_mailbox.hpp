// SPDX-License-Identifier: BSL-1.0
// The messages of collectives (courier/runtime/collectives.hpp): the mailbox that matches a
// message with its receive by (generation, round, source), the posted action that carries a
// value as a parcel, the shared-memory inboxes between localities of one host, and
// round_trip, through which an algorithm sends and receives.
#pragma once

#include <courier/parcelport/error.hpp>
#include <courier/runtime/actions.hpp>
#include <courier/runtime/detail/collective_codec.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

namespace courier::collectives::detail {

/// One message of one collective: its generation, its round and the locality it came from.
struct key {
    std::uint64_t generation;
    std::uint32_t step;
    std::uint32_t source;
    friend bool operator==(key const&, key const&) = default;
};

/// A mailbox slot: the message and, on the other side, whoever waits for it. Created by the
/// first of the two; the second takes it out of the mailbox.
struct slot_base {
    virtual ~slot_base() = default;
    virtual void fail(std::exception_ptr e) noexcept = 0;
    std::type_info const* type = nullptr;
    bool arrived = false; ///< made by the arriving message (else by the receiver)
};
template <class T>
struct slot final : slot_base {
    slot() : f(p.get_future()) { type = &typeid(T); }
    void fail(std::exception_ptr e) noexcept override {
        try {
            p.set_exception(std::move(e));
        } catch (...) {
        }
    }
    promise<T> p;
    future<T> f;
};

/// Matches a message with its receiver: returns the slot the other side created (taking it
/// out of the mailbox), or stores a new one from `make` (called only then) and returns it.
/// Returns null for a message that is refused (a duplicate, one beyond the early-message
/// bound, or one after a failure: logged). A receive after a failure gets a new slot, failed
/// with network_error.
std::shared_ptr<slot_base> match(key const& k, bool arriving,
                                 courier::detail::function_ref<std::shared_ptr<slot_base>()> make);
/// Whether a message that arrived as a parcel waits for its receive (any key): a receive then
/// looks there before its shared-memory inbox, so that the first message for a key wins.
bool mailbox_holds_early() noexcept;
template <class T>
std::shared_ptr<slot_base> make_slot(bool arriving) {
    auto s = std::make_shared<slot<T>>();
    s->arrived = arriving;
    return s;
}

/// Takes the next generation; throws network_error once a locality has failed.
std::uint64_t next_generation();
id_type locality(std::uint32_t rank);
/// The error of a message whose type is not the one its receive expects.
std::exception_ptr type_mismatch(key const& k, std::type_info const& expected,
                                 std::type_info const& got);

/// Shared memory between the localities of one host (collective_rings in the runtime).
/// Whether messages to `rank` may go through its inbox / whether messages from `rank` may come
/// through this locality's.
bool ring_sends_to(std::uint32_t rank) noexcept;
bool ring_listens_to(std::uint32_t rank) noexcept;
/// Whether `rank` can read this process's memory (one copy, by process_vm_readv): large
/// vectors in a message to it may then stay where they are, named by address.
bool ring_reads_from_sender(std::uint32_t rank) noexcept;
/// Copies a message into `to`'s inbox; false: it was not sent (no inbox, full): post it.
/// `keep` (if any) holds what the message names by address until the receiver has taken it.
bool ring_send(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation,
               std::uint32_t step, std::span<std::byte const> payload,
               std::shared_ptr<void const> keep = nullptr);
/// A message in `to`'s inbox that names memory of this process, which must stay unchanged
/// until the receiver has taken (copied) it: its sequence number in that ring.
struct loan {
    std::uint32_t to;
    std::uint64_t seq;
};
/// Copies a message that names memory of this process into `to`'s inbox; false: it was not
/// sent.
bool ring_lend(std::uint32_t to, std::uint64_t wire_id, std::uint64_t generation,
               std::uint32_t step, std::span<std::byte const> payload, loan& l);
/// Waits until every loan's message was taken: spins for the idle spin, then sleeps (the
/// lightweight thread) in growing steps. Throws network_error when a receiver has failed.
/// `bounded`: returns false after the liveness timeout instead of waiting on (an exception
/// leaves the collective: its receivers may have left it too), and only a receiver's own
/// failure ends it sooner (one that has not yet learnt of another's may still read).
bool ring_wait_taken(std::span<loan const> loans, bool bounded = false);
/// If the message at the head of the inbox from `k.source` is `k` with `wire_id`, removes it
/// and calls `load` on its payload and its sender's process id (also when `load` throws). True
/// if it did. `other` (if given) is set when the head holds another message.
bool ring_take(key const& k, std::uint64_t wire_id,
               courier::detail::function_ref<void(std::span<std::byte const>, std::int32_t)> load,
               bool* other = nullptr);
/// How many times receive() looks at the inbox's head for its message before it sets up a
/// slot in the mailbox: 64 (~1 µs; in a collective the peer's message usually comes within
/// that), or once when the host is oversubscribed (the sender may be waiting for this core) or
/// --courier:collective_spin_us is 0.
int ring_head_polls() noexcept;
/// Until `ready()`: moves the messages in the inbox from `from` into the mailbox, spinning up to
/// the idle spin, then `suspend()`s (a sender then nudges this locality with a parcel).
void ring_wait(std::uint32_t from, courier::detail::function_ref<bool()> ready,
               courier::detail::function_ref<void()> suspend);
/// How a message of one type leaves an inbox for the mailbox (registered per wire id).
using ring_loader = void (*)(key const& k, std::span<std::byte const> payload, std::int32_t pid);
bool register_ring_loader(std::uint64_t wire_id, ring_loader load);

template <class T>
void deliver(key const& k, T&& value);

template <class T>
void ring_load(key const& k, std::span<std::byte const> payload, std::int32_t pid) {
    std::optional<T> v;
    try {
        v.emplace(ring_decode<T>(payload, pid));
    } catch (...) {
        // The receiver learns it (its future fails) instead of waiting for good.
        std::shared_ptr<slot_base> s = match(k, true, [] { return make_slot<T>(true); });
        if (s) {
            s->fail(std::current_exception());
        }
        throw;
    }
    deliver(k, std::move(*v));
}

template <class T>
void deliver(key const& k, T&& value) {
    std::shared_ptr<slot_base> s = match(k, true, [] { return make_slot<T>(true); });
    if (!s) {
        return;
    }
    if (*s->type != typeid(T)) {
        std::exception_ptr e = type_mismatch(k, *s->type, typeid(T));
        s->fail(e);
        std::rethrow_exception(e);
    }
    static_cast<slot<T>&>(*s).p.set_value(std::move(value));
}

/// The message carrying a value of type T to another locality's mailbox.
template <class T>
struct message_action {
    using courier_action_tag = void;
    using result_type = void;
    static constexpr char const* name = "courier::collectives::message";

    static std::uint64_t wire_id() noexcept {
        static std::uint64_t const id = courier::detail::typed_action_id(name, typeid(T));
        (void)registered;
        return id;
    }
    static void invoke(serialization::input_archive& in, serialization::output_archive*) {
        courier::detail::request_context* ctx = courier::detail::current_request();
        std::tuple<std::uint64_t, std::uint32_t, T> args; // generation, round, value
        courier::detail::load_arguments(in, args);
        // The source is the sending locality as the transport knows it, not a claim in the
        // message.
        std::uint32_t source = ctx != nullptr ? ctx->source : get_locality_id();
        deliver(key{std::get<0>(args), std::get<1>(args), source}, std::move(std::get<2>(args)));
    }
    inline static bool const registered =
        courier::detail::register_action(wire_id(), name, &invoke) &&
        register_ring_loader(wire_id(), &ring_load<T>);
};

/// The messages of a collective that name its values by address (round_trip::lend): the
/// values must stay unchanged until each receiver has copied them, so the collective calls
/// wait() before it changes them or returns, as MPI's send completes once the receiver has its
/// copy. Leaving by an exception waits too, bounded by the liveness timeout. A collective lends
/// at most one message a round between waits (log2 of at most 64 localities on a host): the
/// loans are held inline, and a full set is waited for before another is added.
class lent {
public:
    lent() = default;
    lent(lent const&) = delete;
    lent& operator=(lent const&) = delete;
    ~lent() {
        if (count_ != 0) {
            try {
                (void)ring_wait_taken(loans(), true);
            } catch (...) { // a receiver failed: it reads nothing more
            }
        }
    }
    /// Makes room for one more loan (waits for the ones held if they fill it).
    void make_room() {
        if (count_ == capacity) {
            wait();
        }
    }
    void add(loan l) noexcept { loans_[count_++] = l; } // after make_room()
    void wait() {
        if (count_ != 0) {
            ring_wait_taken(loans());
            count_ = 0;
        }
    }

private:
    static constexpr std::size_t capacity = 8;
    std::span<loan const> loans() const noexcept { return {loans_.data(), count_}; }
    std::array<loan, capacity> loans_{};
    std::size_t count_ = 0;
};

/// One collective on this locality: its generation, and messages to and from its peers.
class round_trip {
public:
    explicit round_trip(std::uint64_t generation)
        : generation_(generation), rank_(get_locality_id()), size_(get_num_localities()) {}
    std::uint32_t rank() const noexcept { return rank_; }
    std::uint32_t size() const noexcept { return size_; }

    template <class T>
    void send(std::uint32_t to, std::uint32_t step, T value) const {
        if (ring_sends_to(to)) {
            std::uint64_t const id = message_action<T>::wire_id();
            if constexpr (ring_flat<T>::value) {
                std::byte buf[ring_payload_limit];
                ring_writer w{buf, buf + sizeof buf};
                if (ring_encode(value, w)) {
                    if (ring_send(to, id, generation_, step,
                                  {buf, static_cast<std::size_t>(w.at - buf)})) {
                        return;
                    }
                } else if (ring_reads_from_sender(to)) {
                    // Too large for the cell: name its vectors by address, kept alive until
                    // the receiver has copied them.
                    auto keep = std::make_shared<T>(std::move(value));
                    w = ring_writer{buf, buf + sizeof buf};
                    if (ring_encode(*keep, w, true) &&
                        ring_send(to, id, generation_, step,
                                  {buf, static_cast<std::size_t>(w.at - buf)}, keep)) {
                        return;
                    }
                    value = std::move(*keep); // not sent: as a parcel after all
                }
            } else {
                serialization::message m = serialization::save(ring_serialization_options(), value);
                if (m.external_chunk_count() == 0 && m.index_size() <= ring_payload_limit &&
                    ring_send(to, id, generation_, step, m.data())) {
                    return;
                }
            }
        }
        courier::post<message_action<T>>(locality(to), generation_, step, std::move(value));
    }
    /// Sends `value` as send() does, naming its large vectors by address when the receiver
    /// can read them: `value` must then stay unchanged until `l.wait()`.
    template <class T>
    void lend(std::uint32_t to, std::uint32_t step, T const& value, lent& l) const {
        if constexpr (ring_flat<T>::value) {
            if (lend_encoded<T>(to, step, l, [&](ring_writer& w, bool by_address) {
                    return ring_encode(value, w, by_address);
                })) {
                return;
            }
        }
        send(to, step, value);
    }
    /// Sends `at(0)`, ..., `at(count - 1)` (each a T const&) as a std::vector<T>, as lend().
    template <class T, class At>
    void lend_each(std::uint32_t to, std::uint32_t step, std::size_t count, At const& at,
                   lent& l) const {
        if constexpr (ring_flat<T>::value) {
            if (lend_encoded<std::vector<T>>(to, step, l, [&](ring_writer& w, bool by_address) {
                    return ring_encode_each(count, at, w, by_address);
                })) {
                return;
            }
        }
        std::vector<T> copy;
        copy.reserve(count);
        for (std::size_t i = 0; i < count; ++i) {
            copy.push_back(at(i));
        }
        send(to, step, std::move(copy));
    }
    /// Sends the elements of `s` as a std::vector<U>, as lend(): on one host a span of at
    /// least ring_by_address_min bytes is named by address (unchanged until `l.wait()`), else
    /// the elements are copied into the message.
    template <class U>
    void lend_span(std::uint32_t to, std::uint32_t step, std::span<U const> s, lent& l) const {
        if constexpr (ring_flat<std::vector<U>>::value) {
            if (lend_encoded<std::vector<U>>(to, step, l, [&](ring_writer& w, bool by_address) {
                    return ring_encode(s, w, by_address);
                })) {
                return;
            }
        }
        send(to, step, std::vector<U>(s.begin(), s.end()));
    }
    template <class T>
    T receive(std::uint32_t from, std::uint32_t step) const {
        key const k{generation_, step, from};
        bool const ring = ring_listens_to(from);
        // The inbox's head first, unless a parcel already waits in the mailbox (maybe for this
        // key: a forged or repeated message came first, and the first one for a key counts).
        // A peer in the same collective usually sends within a microsecond of this locality:
        // the head is polled a few times for it before a slot is set up in the mailbox (an
        // allocation, a future, the ring drained into it), unless another message is there.
        if (ring && !mailbox_holds_early()) {
            std::optional<T> v;
            auto load = [&](std::span<std::byte const> b, std::int32_t pid) {
                v.emplace(ring_decode<T>(b, pid));
            };
            bool other = false;
            // A parcel that reaches the mailbox early meanwhile (maybe for this key: it came
            // first, and the first message for a key counts) ends the polls.
            for (int polls = 0, n = ring_head_polls(); polls < n && !other; ++polls) {
                if (polls != 0 && mailbox_holds_early()) {
                    break;
                }
                if (ring_take(k, message_action<T>::wire_id(), load, &other)) {
                    return std::move(*v);
                }
            }
        }
        std::shared_ptr<slot_base> s = match(k, false, [] { return make_slot<T>(false); });
        if (*s->type != typeid(T)) {
            std::rethrow_exception(type_mismatch(k, typeid(T), *s->type));
        }
        future<T>& f = static_cast<slot<T>&>(*s).f;
        if (ring && !f.is_ready()) {
            ring_wait(
                from, [&] { return f.is_ready(); }, [&] { f.wait(); });
        }
        return f.get();
    }

private:
    /// Writes a message of type M into a cell with `encode` and puts it into `to`'s inbox, as
    /// a loan of `l` if it names memory by address. False: not sent.
    template <class M, class Encode>
    bool lend_encoded(std::uint32_t to, std::uint32_t step, lent& l, Encode const& encode) const {
        if (!ring_sends_to(to)) {
            return false;
        }
        std::uint64_t const id = message_action<M>::wire_id();
        std::byte buf[ring_payload_limit];
        ring_writer w{buf, buf + sizeof buf};
        if (!encode(w, ring_reads_from_sender(to))) {
            return false;
        }
        std::span<std::byte const> payload{buf, static_cast<std::size_t>(w.at - buf)};
        if (w.by_address == 0) {
            return ring_send(to, id, generation_, step, payload);
        }
        l.make_room();
        loan taken{};
        if (!ring_lend(to, id, generation_, step, payload, taken)) {
            return false;
        }
        l.add(taken);
        return true;
    }

    std::uint64_t generation_;
    std::uint32_t rank_, size_;
};

/// Starts `body(round_trip)` as a task on the next generation; a failure to start (a failed
/// locality) makes the future exceptional.
template <class R, class Body>
future<R> start(Body&& body) {
    try {
        round_trip c(next_generation());
        return courier::async(
            [c, body = std::forward<Body>(body)]() mutable -> R { return std::move(body)(c); });
    } catch (...) {
        return make_exceptional_future<R>(std::current_exception());
    }
}

} // namespace courier::collectives::detail
