// SPDX-License-Identifier: BSL-1.0
// Collectives over all localities, each in O(log P) rounds of point-to-point messages.
//
//   double total = courier::collectives::all_reduce(local, std::plus<>{});
//   courier::future<std::vector<int>> all = courier::collectives::all_gather_async(mine);
//
// Every locality calls the same collectives in the same order (as with MPI): each call takes
// the next generation number, which matches the calls across localities. Several may be in
// flight at once (the _async forms). A blocking form runs the algorithm on the calling thread
// (suspending a Courier thread while it waits for a message); an _async form runs it as a new
// Courier task and returns its future at once, so it never blocks the caller.
//
// Values travel as arguments of a posted action, so any serializable T works and large ones
// (vectors of bitwise types at or above the zero-copy threshold) move as pointer chunks the
// receiver pulls by RMA. Operations need to be associative, not commutative: every algorithm
// combines contributions in rank order.
//
// Algorithms (P localities, any P): barrier by dissemination, all_reduce by recursive doubling
// with the localities beyond the largest power of two folded into a partner first (log2 P + 2
// rounds), broadcast, reduce, gather and scatter over binomial trees, all_gather and all_to_all
// by Bruck's algorithms (ceil(log2 P) rounds), the scans by recursive doubling.
//
// Localities of one host send each other the small messages of collectives (up to ~1 KiB
// serialized) through shared memory, not as parcels: the receiver drains its inbox while it
// waits, spinning up to --courier:idle_spin_us before it suspends. Larger ones, those to other
// hosts, and all of them with --courier:shm_collectives=0, are parcels (collective_rings.hpp in
// the runtime's sources).
//
// Failure: once a locality has failed, every collective in progress fails with network_error
// on every locality, and so does every later one (the group of all localities is broken).
#pragma once

#include <courier/parcelport/error.hpp>
#include <courier/runtime/actions.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace courier::collectives {

namespace detail {

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
/// If the message at the head of the inbox from `k.source` is `k` with `wire_id`, removes it
/// and calls `load` on its payload and its sender's process id (also when `load` throws). True
/// if it did.
bool ring_take(key const& k, std::uint64_t wire_id,
               courier::detail::function_ref<void(std::span<std::byte const>, std::int32_t)> load);
/// Reads `count` pieces of process `pid`'s memory into this one's (process_vm_readv); throws
/// network_error if it cannot read them all.
struct ring_piece {
    void* local;
    std::uint64_t remote;
    std::size_t bytes;
};
void ring_read_pieces(std::int32_t pid, ring_piece const* pieces, std::size_t count);
/// Until `ready()`: moves the messages in the inbox from `from` into the mailbox, spinning up to
/// the idle spin, then `suspend()`s (a sender then nudges this locality with a parcel).
void ring_wait(std::uint32_t from, courier::detail::function_ref<bool()> ready,
               courier::detail::function_ref<void()> suspend);
/// How a message of one type leaves an inbox for the mailbox (registered per wire id).
using ring_loader = void (*)(key const& k, std::span<std::byte const> payload, std::int32_t pid);
bool register_ring_loader(std::uint64_t wire_id, ring_loader load);

/// The bytes of a value in an inbox cell. Flat values (arithmetic values, enums, and vectors
/// of flat values) are written as they are, a vector as its element count (4 bytes), a tag
/// (1 byte) and its elements, or, for a vector of arithmetic values too large for the cell
/// when the receiver can read the sender's memory, tag 1 and the address of its elements,
/// which the receiver copies straight into its own vector (one copy, as MPI's CMA path);
/// anything else as a serialized message without zero copy (all in its index).
template <class T>
struct ring_flat : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T>> {};
template <class U, class A>
struct ring_flat<std::vector<U, A>> : std::bool_constant<ring_flat<U>::value> {};
template <class A>
struct ring_flat<std::vector<bool, A>> : std::false_type {};
template <>
struct ring_flat<bool> : std::false_type {}; // not every byte is a bool: serialized

inline constexpr std::size_t ring_payload_limit = 992; // collective_rings::payload_capacity
/// Vectors named by address: at least this many bytes, at most ring_max_by_address.
inline constexpr std::size_t ring_by_address_min = 512;
inline constexpr std::size_t ring_max_by_address = std::size_t{256} << 20;

struct ring_writer {
    std::byte* at;
    std::byte* end;
    std::size_t by_address = 0; // bytes named by address so far (at most ring_max_by_address)
    bool put(void const* p, std::size_t n) noexcept {
        if (static_cast<std::size_t>(end - at) < n) {
            return false;
        }
        if (n != 0) {
            std::memcpy(at, p, n);
        }
        at += n;
        return true;
    }
};
struct ring_reader {
    std::span<std::byte const> rest;
    std::vector<ring_piece>* pieces = nullptr; // where vectors named by address go
    std::size_t by_address = 0;                // their bytes so far (at most ring_max_by_address)
    void get(void* p, std::size_t n) {
        if (rest.size() < n) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory ends early");
        }
        if (n != 0) {
            std::memcpy(p, rest.data(), n);
        }
        rest = rest.subspan(n);
    }
};

/// `by_address`: vectors of arithmetic values of at least ring_by_address_min bytes are named
/// by address (set by the caller only when the receiver can read this process's memory and
/// the value stays alive until it has).
template <class T>
bool ring_encode(T const& v, ring_writer& w, bool by_address = false) noexcept {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        return w.put(&v, sizeof v);
    } else { // a vector
        using U = typename T::value_type;
        std::size_t const bytes = v.size() * sizeof(U);
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (by_address && bytes >= ring_by_address_min &&
                bytes <= ring_max_by_address - w.by_address) {
                w.by_address += bytes;
                auto const n = static_cast<std::uint32_t>(v.size());
                std::uint8_t const tag = 1;
                auto const at = reinterpret_cast<std::uintptr_t>(v.data());
                std::uint64_t const addr = at;
                return w.put(&n, sizeof n) && w.put(&tag, 1) && w.put(&addr, sizeof addr);
            }
        }
        if (v.size() > ring_payload_limit) {
            return false;
        }
        auto const n = static_cast<std::uint32_t>(v.size());
        std::uint8_t const tag = 0;
        if (!w.put(&n, sizeof n) || !w.put(&tag, 1)) {
            return false;
        }
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            return w.put(v.data(), bytes);
        } else {
            for (auto const& e : v) {
                if (!ring_encode(e, w, by_address)) {
                    return false;
                }
            }
            return true;
        }
    }
}

template <class T>
void ring_decode_into(T& v, ring_reader& r) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
        r.get(&v, sizeof v);
    } else {
        std::uint32_t n = 0;
        std::uint8_t tag = 0;
        r.get(&n, sizeof n);
        r.get(&tag, 1);
        using U = typename T::value_type;
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (tag == 1) {
                std::uint64_t addr = 0;
                r.get(&addr, sizeof addr);
                std::size_t const bytes = std::size_t{n} * sizeof(U);
                r.by_address += bytes;
                if (r.pieces == nullptr || bytes > ring_max_by_address ||
                    r.by_address > ring_max_by_address) {
                    throw serialization::serialization_error(
                        "courier: a collective message in shared memory names " +
                        std::to_string(bytes) + " bytes by address");
                }
                v.resize(n);
                r.pieces->push_back(ring_piece{v.data(), addr, bytes});
                return;
            }
        }
        if (tag != 0) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory has a bad tag");
        }
        if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
            if (r.rest.size() / sizeof(U) < n) {
                throw serialization::serialization_error(
                    "courier: a collective message in shared memory ends early");
            }
            v.resize(n);
            r.get(v.data(), std::size_t{n} * sizeof(U));
        } else {
            if (r.rest.size() < n) { // every element takes at least a byte
                throw serialization::serialization_error(
                    "courier: a collective message in shared memory ends early");
            }
            v.resize(n);
            for (auto& e : v) {
                ring_decode_into(e, r);
            }
        }
    }
}

serialization::options ring_serialization_options() noexcept;

/// `pid`: the sender's process, whose memory holds the vectors named by address (0: none may
/// be).
template <class T>
T ring_decode(std::span<std::byte const> payload, std::int32_t pid = 0) {
    T v{};
    if constexpr (ring_flat<T>::value) {
        std::vector<ring_piece> pieces;
        ring_reader r{payload, pid != 0 ? &pieces : nullptr};
        ring_decode_into(v, r);
        if (!r.rest.empty()) {
            throw serialization::serialization_error(
                "courier: a collective message in shared memory has " +
                std::to_string(r.rest.size()) + " bytes too many");
        }
        if (!pieces.empty()) {
            ring_read_pieces(pid, pieces.data(), pieces.size());
        }
    } else {
        serialization::message m = serialization::message::from_bytes(payload);
        serialization::load(m, v);
    }
    return v;
}

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
    template <class T>
    T receive(std::uint32_t from, std::uint32_t step) const {
        key const k{generation_, step, from};
        bool const ring = ring_listens_to(from);
        if (ring) {
            std::optional<T> v;
            if (ring_take(k, message_action<T>::wire_id(),
                          [&](std::span<std::byte const> b, std::int32_t pid) {
                              v.emplace(ring_decode<T>(b, pid));
                          })) {
                return std::move(*v);
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

template <class T, class Op>
T all_reduce(round_trip const& c, T value, Op& op) {
    std::uint32_t const p = c.size(), r = c.rank();
    if (p == 1) {
        return value;
    }
    std::uint32_t const pof2 = std::bit_floor(p);
    std::uint32_t const rem = p - pof2;
    // Fold: below 2*rem, each even locality gives its value to the odd one above it and waits
    // for the result, which comes after the log2(pof2) rounds of recursive doubling.
    std::uint32_t const last_step = 1 + static_cast<std::uint32_t>(std::countr_zero(pof2));
    if (r < 2 * rem && r % 2 == 0) {
        c.send(r + 1, 0, std::move(value));
        return c.receive<T>(r + 1, last_step);
    }
    T acc = std::move(value);
    std::uint32_t newrank = r < 2 * rem ? r / 2 : r - rem;
    if (r < 2 * rem) {
        acc = op(c.receive<T>(r - 1, 0), std::move(acc));
    }
    std::uint32_t step = 1;
    for (std::uint32_t mask = 1; mask < pof2; mask <<= 1, ++step) {
        std::uint32_t partner_new = newrank ^ mask;
        std::uint32_t partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
        c.send(partner, step, acc);
        T other = c.receive<T>(partner, step);
        acc = partner_new < newrank ? op(std::move(other), std::move(acc))
                                    : op(std::move(acc), std::move(other));
    }
    if (r < 2 * rem) {
        c.send(r - 1, last_step, acc);
    }
    return acc;
}

template <class T>
T broadcast(round_trip const& c, T value, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    std::uint32_t mask = 1;
    while (mask < p) {
        if ((vr & mask) != 0) {
            value = c.receive<T>((vr - mask + root) % p, 0);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < p) {
            c.send((vr + mask + root) % p, 0, value);
        }
    }
    return value;
}

template <class T, class Op>
T reduce(round_trip const& c, T value, Op& op, std::uint32_t root) {
    std::uint32_t const p = c.size(), r = c.rank();
    // A binomial tree towards locality 0 (contiguous ranks: the order of op is kept), then to
    // the root.
    for (std::uint32_t mask = 1; mask < p; mask <<= 1) {
        if ((r & mask) != 0) {
            c.send(r & ~mask, 0, std::move(value));
            value = T{};
            break;
        }
        if ((r | mask) < p) {
            value = op(std::move(value), c.receive<T>(r | mask, 0));
        }
    }
    if (root != 0) {
        if (r == 0) {
            c.send(root, 1, std::move(value));
            value = T{};
        } else if (r == root) {
            value = c.receive<T>(0, 1);
        }
    }
    return value;
}

template <class T>
std::vector<T> gather(round_trip const& c, T value, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    // block[i]: the value of virtual rank vr + i, for the subtree under vr.
    std::vector<T> block;
    block.push_back(std::move(value));
    for (std::uint32_t mask = 1; mask < p; mask <<= 1) {
        if ((vr & mask) != 0) {
            c.send(((vr & ~mask) + root) % p, 0, std::move(block));
            return {};
        }
        if ((vr | mask) < p) {
            auto more = c.receive<std::vector<T>>(((vr | mask) + root) % p, 0);
            if (more.size() != std::min(mask, p - (vr | mask))) {
                throw std::runtime_error("courier: gather: a subtree sent " +
                                         std::to_string(more.size()) + " values");
            }
            for (auto& v : more) {
                block.push_back(std::move(v));
            }
        }
    }
    std::vector<T> result(p);
    for (std::uint32_t i = 0; i < p; ++i) {
        result[(i + root) % p] = std::move(block[i]);
    }
    return result;
}

template <class T>
T scatter(round_trip const& c, std::vector<T> values, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    std::vector<T> block; // the values of virtual ranks vr, vr + 1, ... of this subtree
    std::uint32_t mask = 1;
    if (vr == 0) {
        if (values.size() != p) {
            throw std::invalid_argument("courier: scatter needs one value per locality, got " +
                                        std::to_string(values.size()));
        }
        block.resize(p);
        for (std::uint32_t i = 0; i < p; ++i) {
            block[i] = std::move(values[(i + root) % p]);
        }
        mask = std::bit_ceil(p);
    } else {
        mask = vr & (~vr + 1); // the lowest bit set: vr's parent is vr - mask
        block = c.receive<std::vector<T>>((vr - mask + root) % p, 0);
        if (block.size() != std::min(mask, p - vr)) {
            throw std::runtime_error("courier: scatter: received " + std::to_string(block.size()) +
                                     " values for a subtree");
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < p) {
            std::uint32_t n = std::min(mask, p - vr - mask);
            std::vector<T> part(std::make_move_iterator(block.begin() + mask),
                                std::make_move_iterator(block.begin() + mask + n));
            c.send((vr + mask + root) % p, 0, std::move(part));
        }
    }
    return std::move(block[0]);
}

template <class T>
std::vector<T> all_gather(round_trip const& c, T value) {
    std::uint32_t const p = c.size(), r = c.rank();
    std::vector<T> buf; // buf[j]: the value of locality (r + j) % p
    buf.push_back(std::move(value));
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        std::uint32_t n = std::min(dist, p - dist);
        c.send((r + p - dist) % p, step, std::vector<T>(buf.begin(), buf.begin() + n));
        auto more = c.receive<std::vector<T>>((r + dist) % p, step);
        if (more.size() != n) {
            throw std::runtime_error("courier: all_gather: a round brought " +
                                     std::to_string(more.size()) + " values");
        }
        for (auto& v : more) {
            buf.push_back(std::move(v));
        }
    }
    std::vector<T> result(p);
    for (std::uint32_t j = 0; j < p; ++j) {
        result[(r + j) % p] = std::move(buf[j]);
    }
    return result;
}

template <class T>
std::vector<T> all_to_all(round_trip const& c, std::vector<T> values) {
    std::uint32_t const p = c.size(), r = c.rank();
    if (values.size() != p) {
        throw std::invalid_argument("courier: all_to_all needs one value per locality, got " +
                                    std::to_string(values.size()));
    }
    // tmp[i]: the value travelling i localities forward; in round k the values whose index has
    // bit k set move 2^k further. At the end tmp[i] came from locality r - i.
    std::vector<T> tmp(p);
    for (std::uint32_t i = 0; i < p; ++i) {
        tmp[i] = std::move(values[(r + i) % p]);
    }
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        std::vector<T> out;
        for (std::uint32_t i = dist; i < p; ++i) {
            if ((i & dist) != 0) {
                out.push_back(std::move(tmp[i]));
            }
        }
        std::size_t n = out.size();
        c.send((r + dist) % p, step, std::move(out));
        auto in = c.receive<std::vector<T>>((r + p - dist) % p, step);
        if (in.size() != n) {
            throw std::runtime_error("courier: all_to_all: a round brought " +
                                     std::to_string(in.size()) + " values");
        }
        std::size_t next = 0;
        for (std::uint32_t i = dist; i < p; ++i) {
            if ((i & dist) != 0) {
                tmp[i] = std::move(in[next++]);
            }
        }
    }
    std::vector<T> result(p);
    for (std::uint32_t src = 0; src < p; ++src) {
        result[src] = std::move(tmp[(r + p - src) % p]);
    }
    return result;
}

/// The prefix over localities 0..r (inclusive), and over 0..r-1 (exclusive: empty on 0).
template <class T, class Op>
std::pair<T, std::optional<T>> scan(round_trip const& c, T value, Op& op) {
    std::uint32_t const p = c.size(), r = c.rank();
    T acc = std::move(value);
    std::optional<T> before;
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        if (r + dist < p) {
            c.send(r + dist, step, acc);
        }
        if (r >= dist) {
            T other = c.receive<T>(r - dist, step);
            before = before ? op(other, std::move(*before)) : other;
            acc = op(std::move(other), std::move(acc));
        }
    }
    return {std::move(acc), std::move(before)};
}

inline void barrier(round_trip const& c) {
    std::uint32_t const p = c.size(), r = c.rank();
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        c.send((r + dist) % p, step, std::uint8_t{0});
        (void)c.receive<std::uint8_t>((r + p - dist) % p, step);
    }
}

} // namespace detail

/// The combination of every locality's `value` with `op`, in rank order, on every locality.
template <class T, class Op>
T all_reduce(T value, Op op) {
    return detail::all_reduce(detail::round_trip(detail::next_generation()), std::move(value), op);
}
template <class T, class Op>
future<T> all_reduce_async(T value, Op op) {
    return detail::start<T>([v = std::move(value), op = std::move(op)](auto c) mutable {
        return detail::all_reduce(c, std::move(v), op);
    });
}

/// Every locality returns `root`'s value.
template <class T>
T broadcast(T value, std::uint32_t root = 0) {
    return detail::broadcast(detail::round_trip(detail::next_generation()), std::move(value), root);
}
template <class T>
future<T> broadcast_async(T value, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(value), root](auto c) mutable {
        return detail::broadcast(c, std::move(v), root);
    });
}

/// Returns once every locality has entered the barrier.
inline void barrier() {
    detail::barrier(detail::round_trip(detail::next_generation()));
}
inline future<void> barrier_async() {
    return detail::start<void>([](auto c) { detail::barrier(c); });
}

/// result[i] is locality i's value, on every locality.
template <class T>
std::vector<T> all_gather(T value) {
    return detail::all_gather(detail::round_trip(detail::next_generation()), std::move(value));
}
template <class T>
future<std::vector<T>> all_gather_async(T value) {
    return detail::start<std::vector<T>>(
        [v = std::move(value)](auto c) mutable { return detail::all_gather(c, std::move(v)); });
}

/// values[i] goes to locality i; result[i] came from locality i. values.size() must be P.
template <class T>
std::vector<T> all_to_all(std::vector<T> values) {
    return detail::all_to_all(detail::round_trip(detail::next_generation()), std::move(values));
}
template <class T>
future<std::vector<T>> all_to_all_async(std::vector<T> values) {
    return detail::start<std::vector<T>>(
        [v = std::move(values)](auto c) mutable { return detail::all_to_all(c, std::move(v)); });
}

/// On `root`, result[i] is locality i's value; empty elsewhere.
template <class T>
std::vector<T> gather(T value, std::uint32_t root = 0) {
    return detail::gather(detail::round_trip(detail::next_generation()), std::move(value), root);
}
template <class T>
future<std::vector<T>> gather_async(T value, std::uint32_t root = 0) {
    return detail::start<std::vector<T>>([v = std::move(value), root](auto c) mutable {
        return detail::gather(c, std::move(v), root);
    });
}

/// Locality i gets values[i] of `root` (values are read on root only).
template <class T>
T scatter(std::vector<T> values, std::uint32_t root = 0) {
    return detail::scatter(detail::round_trip(detail::next_generation()), std::move(values), root);
}
template <class T>
future<T> scatter_async(std::vector<T> values, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(values), root](auto c) mutable {
        return detail::scatter(c, std::move(v), root);
    });
}

/// The combination of every locality's value in rank order, on `root` (elsewhere: T{}).
template <class T, class Op>
T reduce(T value, Op op, std::uint32_t root = 0) {
    return detail::reduce(detail::round_trip(detail::next_generation()), std::move(value), op,
                          root);
}
template <class T, class Op>
future<T> reduce_async(T value, Op op, std::uint32_t root = 0) {
    return detail::start<T>([v = std::move(value), op = std::move(op), root](auto c) mutable {
        return detail::reduce(c, std::move(v), op, root);
    });
}

/// On locality i: value_0 op value_1 op ... op value_i.
template <class T, class Op>
T inclusive_scan(T value, Op op) {
    return detail::scan(detail::round_trip(detail::next_generation()), std::move(value), op).first;
}
template <class T, class Op>
future<T> inclusive_scan_async(T value, Op op) {
    return detail::start<T>([v = std::move(value), op = std::move(op)](auto c) mutable {
        return detail::scan(c, std::move(v), op).first;
    });
}

/// On locality i: init op value_0 op ... op value_(i-1) (init on locality 0).
template <class T, class Op>
T exclusive_scan(T value, Op op, T init) {
    auto before =
        detail::scan(detail::round_trip(detail::next_generation()), std::move(value), op).second;
    return before ? op(std::move(init), std::move(*before)) : init;
}
template <class T, class Op>
future<T> exclusive_scan_async(T value, Op op, T init) {
    return detail::start<T>(
        [v = std::move(value), op = std::move(op), init = std::move(init)](auto c) mutable {
            auto before = detail::scan(c, std::move(v), op).second;
            return before ? op(std::move(init), std::move(*before)) : std::move(init);
        });
}

} // namespace courier::collectives
