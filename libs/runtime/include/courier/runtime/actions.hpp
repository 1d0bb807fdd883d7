// SPDX-License-Identifier: BSL-1.0
// Localities and remote actions.
//
//   double scale_sum(std::vector<double> const& v, double factor);
//   COURIER_PLAIN_ACTION(scale_sum, scale_sum_action);          // namespace scope
//   courier::future<double> f = courier::async<scale_sum_action>(locality, v, 2.0);
//
// Arguments are decay-copied (rvalues moved) into the parcel, so the caller may reuse them at
// once; large bitwise arguments then travel as pointer chunks (pulled by RMA, never copied on
// the send side) — pass a serialize_buffer in reference mode to avoid even the decay copy, and
// use async_cb to learn when its memory may be reused. A remote exception is rethrown by get()
// as courier::remote_exception (type name, message, locality). An unknown action id is rejected
// by the receiver with an error reply and a log line.
#pragma once

#include <courier/common/small_alloc.hpp>
#include <courier/parcelport/error.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/runtime/async.hpp>
#include <courier/runtime/detail/function_ref.hpp>
#include <courier/serialization.hpp>
#include <courier/serialization/flat_stream.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace courier {

namespace detail {
/// The credits one process holds on a component (distributed reference counting, see
/// components.hpp). Shared by the copies of an id_type in this process; when the last copy is
/// gone, the credits go back to the component's locality.
struct gid_ref {
    std::uint64_t msb, lsb;
    std::atomic<std::uint64_t> credits;
    gid_ref(std::uint64_t m, std::uint64_t l, std::uint64_t c) : msb(m), lsb(l), credits(c) {}
    gid_ref(gid_ref const&) = delete;
    gid_ref& operator=(gid_ref const&) = delete;
    ~gid_ref(); // returns the credits (defined in distributed.cpp)
    /// Credits for a copy of the id leaving this process: half of ours; when we hold only one,
    /// first more from the component's locality (a round trip, once per 47 hops of a chain or
    /// 47 calls through one holder).
    std::uint64_t split();
};
} // namespace detail

/// A global id: a locality, or a component. A component's id_type is a counted reference
/// (components.hpp): the component lives while one exists anywhere. Comparison looks at the
/// id only.
struct id_type {
    std::uint64_t msb = 0;
    std::uint64_t lsb = 0;
    std::shared_ptr<detail::gid_ref> ref; // null: a locality, or an unmanaged id

    id_type() = default;
    id_type(std::uint64_t m, std::uint64_t l, std::shared_ptr<detail::gid_ref> r = nullptr)
        : msb(m), lsb(l), ref(std::move(r)) {}

    friend bool operator==(id_type const& a, id_type const& b) noexcept {
        return a.msb == b.msb && a.lsb == b.lsb;
    }
    explicit operator bool() const noexcept { return msb != 0 || lsb != 0; }
    /// Whether this id keeps a component alive.
    bool is_managed() const noexcept { return ref != nullptr; }

    template <class A>
    void save(A& ar, unsigned) const {
        // (An id whose numbers were edited by hand no longer matches its credits: it travels
        // without them.)
        std::uint64_t credits = ref && ref->msb == msb && ref->lsb == lsb ? ref->split() : 0;
        ar.save(msb);
        ar.save(lsb);
        ar.save(credits);
    }
    template <class A>
    void load(A& ar, unsigned) {
        std::uint64_t credits = 0;
        ar.load(msb);
        ar.load(lsb);
        ar.load(credits);
        ref = credits != 0 ? std::make_shared<detail::gid_ref>(msb, lsb, credits) : nullptr;
    }
};

id_type find_here();
std::vector<id_type> find_all_localities();
std::vector<id_type> find_remote_localities();
std::uint32_t get_locality_id();
std::uint32_t get_num_localities();
/// The locality an id lives on.
std::uint32_t get_locality_id(id_type const& id);

/// Counters of this locality's transport (all zero when running alone).
parcelport::statistics get_parcelport_statistics();
/// The same by provider: one entry per libfabric provider in use ("shm" and "tcp;ofi_rxm"
/// when the job spans hosts with provider "auto"); empty when running alone.
std::vector<std::pair<std::string, parcelport::statistics>> get_parcelport_statistics_by_provider();

/// Flow control on this locality (--courier:parcels_in_flight and bytes_in_flight): the window
/// each pair of localities has, what it holds now and how often senders had to wait for it.
struct flow_statistics {
    std::int64_t window_parcels = 0; ///< 0: no flow control
    std::int64_t window_bytes = 0;
    std::int64_t parcels_in_flight = 0; ///< to every destination, sent and not yet started
    std::int64_t bytes_in_flight = 0;
    std::uint64_t waits = 0;      ///< requests that waited for room in a window
    std::uint64_t overdrafts = 0; ///< requests sent over a window where waiting was impossible
    std::uint64_t credits_sent = 0;
    std::uint64_t credits_received = 0;
    /// Requests from every other locality that started here and whose credits are not yet
    /// given back (they go back a quarter window at a time).
    std::int64_t parcels_unreturned = 0;
    std::int64_t bytes_unreturned = 0;
};
flow_statistics get_flow_statistics();

/// An exception thrown by a remote action, rethrown on the caller.
class remote_exception : public std::runtime_error {
public:
    remote_exception(std::string type, std::string message, std::uint32_t locality);
    std::string const& type_name() const noexcept { return type_; }
    std::string const& message() const noexcept { return message_; }
    std::uint32_t locality() const noexcept { return locality_; }

private:
    std::string type_, message_;
    std::uint32_t locality_;
};

namespace detail {

template <std::size_t N>
struct fixed_string {
    char value[N];
    constexpr fixed_string(char const (&s)[N]) {
        for (std::size_t i = 0; i < N; ++i) {
            value[i] = s[i];
        }
    }
    constexpr std::string_view view() const { return {value, N - 1}; }
};

template <class F>
struct function_traits;
template <class R, class... A>
struct function_traits<R (*)(A...)> {
    using result = R;
    using args = std::tuple<std::decay_t<A>...>;
};
template <class R, class... A>
struct function_traits<R (*)(A...) noexcept> : function_traits<R (*)(A...)> {};

/// Runs an action: loads its arguments from `args`, calls it, and saves its result into
/// `result`, or nowhere when `result` is null (a posted action: nobody waits for a reply, so
/// none is written).
using action_invoker = void (*)(serialization::input_archive& args,
                                serialization::output_archive* result);
/// action_invoker for an action whose arguments are all flat (serialization::flat_loadable),
/// read from a stream of one index chunk where it lies: no message, no input archive. Null for
/// actions with other arguments. Returns the error if the arguments do not load, having called
/// nothing: the loaders are Courier's own, so the stream is malformed (a post's receiver drops
/// it as such; a call is answered with the error); the action's own exceptions propagate.
using flat_invoker = std::exception_ptr (*)(serialization::flat_reader& args,
                                            serialization::output_archive* result);
bool register_action(std::uint64_t id, char const* name, action_invoker invoke,
                     flat_invoker flat = nullptr);
/// The name an action was registered under, or nullptr (lock-free; incoming requests use it).
char const* registered_action_name(std::uint64_t id) noexcept;

/// Where a request's reply goes: a function and the future state it fulfils, of which it
/// holds one reference. Move-only, and no allocation (a std::function holding the state did
/// allocate: it stores only trivially copyable callables inline).
class reply_handler {
public:
    using function = void (*)(state_base* st, serialization::input_archive* reply,
                              std::exception_ptr error);
    /// The same for a successful reply read where it lies (a stream of one index chunk, the
    /// reader at the result): null where the result does not load from a flat stream.
    using flat_function = void (*)(state_base* st, serialization::flat_reader& reply);
    reply_handler() noexcept = default;
    /// Adopts one reference to `st`.
    reply_handler(function f, state_base* st, flat_function flat = nullptr) noexcept
        : f_(f), flat_(flat), st_(st) {}
    /// Leaves `o` empty.
    reply_handler(reply_handler&& o) noexcept
        : f_(std::exchange(o.f_, nullptr)), flat_(std::exchange(o.flat_, nullptr)),
          st_(std::exchange(o.st_, nullptr)) {}
    reply_handler& operator=(reply_handler&& o) noexcept {
        reply_handler(std::move(o)).swap(*this);
        return *this;
    }
    ~reply_handler() {
        if (st_ != nullptr) {
            st_->release();
        }
    }
    void swap(reply_handler& o) noexcept {
        std::swap(f_, o.f_);
        std::swap(flat_, o.flat_);
        std::swap(st_, o.st_);
    }
    explicit operator bool() const noexcept { return f_ != nullptr; }
    /// The reply's archive (positioned at the result), or the error that replaces it.
    void operator()(serialization::input_archive* reply, std::exception_ptr error) const {
        f_(st_, reply, std::move(error));
    }
    /// Whether the result loads from a flat stream (the second call operator).
    bool reads_flat() const noexcept { return flat_ != nullptr; }
    /// A successful reply read where it lies, the reader positioned at the result.
    void operator()(serialization::flat_reader& reply) const { flat_(st_, reply); }

private:
    function f_ = nullptr;
    flat_function flat_ = nullptr;
    state_base* st_ = nullptr;
};

/// Sends a request; `complete` later receives the reply's archive (positioned at the result),
/// a flat_reader over it (reply_handler::reads_flat), or an exception. `on_sent` (optional) runs
/// when the arguments' memory may be reused. `ordered`: runs on `dest` after every ordered request
/// this locality sent there before it has run (post_ordered, async_ordered).
void send_request(std::uint32_t dest, std::uint64_t action_id,
                  function_ref<void(serialization::output_archive&)> write_args,
                  reply_handler complete, std::function<void(std::error_code const&)> on_sent,
                  bool wants_reply, bool ordered = false);

/// A request's arguments written as a flat stream (serialization/flat_stream.hpp), or, when
/// the transport did not take the stream after all, into an output archive.
struct flat_arguments {
    void const* args;
    void (*size)(void const* args, serialization::flat_sizer& s);
    void (*write)(void const* args, serialization::flat_writer& w);
    void (*save)(void const* args, serialization::output_archive& ar);
};
/// Sends a post whose arguments are flat straight into the batch its transport holds for
/// `dest` now, or as a batch of its own, with no message built (send_request's ~half of the
/// instructions). False: not taken (no batch open or about to open, arguments not flat with
/// `dest`'s zero-copy threshold, a thread that is not a worker, tracing on, ...): nothing was
/// done, and the caller sends it with send_request.
bool send_post_flat(std::uint32_t dest, std::uint64_t action_id, flat_arguments const& args);
/// As send_post_flat, for a call whose reply goes to `complete` (moved from only if the call
/// is taken): its pending slot is taken and published before the request leaves, and a send
/// that fails fails it.
bool send_call_flat(std::uint32_t dest, std::uint64_t action_id, flat_arguments const& args,
                    reply_handler& complete);

/// Fulfils a remote call's future from its reply.
template <class R>
void complete_call(state_base* base, serialization::input_archive* in, std::exception_ptr e) {
    auto* st = static_cast<shared_state<R>*>(base);
    if (e) {
        try {
            st->set_exception(e);
        } catch (...) {
        }
        return;
    }
    fulfil(st, [&]() -> R {
        if constexpr (std::is_void_v<R>) {
            in->finish();
        } else {
            R r{};
            try {
                in->set_top_level(&r, sizeof r);
                in->load(r);
                in->finish();
            } catch (...) {
                in->rollback(); // before r goes: a half-built deep graph is undone
                throw;
            }
            return r;
        }
    });
}

/// complete_call for a successful reply read where it lies: no message, no input archive
/// (~400 instructions per small reply less on the caller of an 8 B echo).
template <class R>
void complete_call_flat(state_base* base, serialization::flat_reader& in) {
    fulfil(static_cast<shared_state<R>*>(base), [&]() -> R {
        if constexpr (std::is_void_v<R>) {
            in.finish();
        } else {
            R r{};
            in.load(r);
            in.finish();
            return r;
        }
    });
}
/// complete_call_flat<R> where R loads from a flat stream (or is void), else null.
template <class R>
constexpr reply_handler::flat_function flat_completion() noexcept {
    if constexpr (std::is_void_v<R>) {
        return &complete_call_flat<R>;
    } else if constexpr (serialization::flat_loadable<R>) {
        return &complete_call_flat<R>;
    } else {
        return nullptr;
    }
}

/// Whether a result of type T leaves nothing in its reply that refers to the result itself:
/// a number is copied into the index; a serialize_buffer's bytes, when they travel as a
/// pointer chunk, are kept alive by its serializer through the buffer's own owner.
template <class T>
inline constexpr bool result_self_contained =
    std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_same_v<T, std::byte>;
template <class T>
inline constexpr bool result_self_contained<serialization::serialize_buffer<T>> = true;

/// Writes an action's result into the reply, keeping it alive as long as the reply: large
/// results travel as pointer chunks that reference it until the caller has pulled them. A
/// self-contained one (result_self_contained) is written as it is: the copy kept with the
/// reply cost each call a pool block, its count's updates and its release (~200 instructions
/// on the callee of an 8 B echo).
template <class R>
void save_result(serialization::output_archive* out, R&& r) {
    if (out == nullptr) {
        return; // a posted action's result goes nowhere
    }
    if constexpr (result_self_contained<std::decay_t<R>>) {
        out->save(r);
    } else {
        auto keep = std::allocate_shared<std::decay_t<R>>(pool_allocator<std::decay_t<R>>{},
                                                          std::forward<R>(r));
        out->keep_alive(keep);
        out->save(*keep);
    }
}

/// The request an action runs for: who asked (rid 0: a posted action, nobody waits).
struct request_context {
    std::uint32_t source = 0;
    std::uint64_t rid = 0;
    bool control = false;
    char const* name = "?";
    bool deferred = false; ///< the action answers later (send_deferred_reply), not on return
};
/// The request of the action running on this thread, once (then null); null outside an
/// action. An action reads it before anything can suspend it.
request_context* current_request() noexcept;
/// Answers a deferred request: the result `write` produces, or `error` as a remote exception.
void send_deferred_reply(request_context const& r,
                         function_ref<void(serialization::output_archive&)> write,
                         std::exception_ptr error) noexcept;

/// Answers a deferred request with `value` (kept alive with the reply: a large one travels as
/// a pointer chunk the caller pulls later).
template <class T>
void send_deferred_result(request_context const& r, T value) {
    auto keep = std::make_shared<T>(std::move(value));
    send_deferred_reply(
        r,
        [&](serialization::output_archive& out) {
            out.keep_alive(keep);
            out.save(*keep);
        },
        nullptr);
}

/// The reply of an action whose function returned `f`: written now if `f` is ready, else sent
/// when it becomes ready (the caller's future waits for it; the worker does not).
template <class R>
void reply_with(request_context* ctx, serialization::output_archive* out, future<R> f) {
    if (f.is_ready() || ctx == nullptr) {
        if constexpr (std::is_void_v<R>) {
            f.get();
        } else {
            save_result(out, f.get());
        }
        return;
    }
    ctx->deferred = true;
    (void)f.then([r = *ctx](future<R> done) {
        try {
            if constexpr (std::is_void_v<R>) {
                done.get();
                send_deferred_reply(
                    r, [](serialization::output_archive&) {}, nullptr);
            } else {
                send_deferred_result(r, done.get());
            }
        } catch (...) {
            send_deferred_reply(
                r, [](serialization::output_archive&) {}, std::current_exception());
        }
    });
}

/// Loads an action's arguments into `args` (a tuple); on failure, undoes the deep-copy
/// pointers already built in them before they are destroyed, and rethrows.
template <class Tuple>
void load_arguments(serialization::input_archive& in, Tuple& args) {
    try {
        in.set_top_level(&args, sizeof args);
        std::apply([&](auto&... a) { (in.load(a), ...); }, args);
        in.finish();
    } catch (...) {
        in.rollback(); // before args go: their destructors must not see half-built graphs
        throw;
    }
}

/// Thrown by plain_action::invoke for a post whose arguments are all flat and do not load
/// from its input archive: Courier's own loaders failed, so the bytes are at fault, and the
/// receiver drops the parcel as malformed (as it drops one that flat_invoke cannot read)
/// rather than counting a failed posted action. A call's caller gets the error itself; a post
/// with a chunk its receiver refused (over --courier:max_parcel_size, no memory) is a failed
/// posted action as before.
class malformed_post : public serialization::serialization_error {
public:
    using serialization::serialization_error::serialization_error;
};

/// Whether every type of a tuple of arguments is read by flat_reader (plain_action::flat_entry).
template <class Tuple>
struct all_flat_loadable;
template <class... A>
struct all_flat_loadable<std::tuple<A...>>
    : std::bool_constant<(serialization::flat_loadable<A> && ...)> {};

/// The wire id of an action template instantiated for type `type` (hash of both names).
inline std::uint64_t typed_action_id(std::string_view name, std::type_info const& type) noexcept {
    return serialization::detail::fnv1a64(name) ^
           (serialization::detail::fnv1a64(type.name()) * 0x9e3779b97f4a7c15ull);
}

} // namespace detail

/// The action type behind COURIER_PLAIN_ACTION: calls F on the target locality.
/// A function returning future<R> is an action returning R: the reply leaves when the future
/// is ready, and no worker waits for it meanwhile.
template <auto F, detail::fixed_string Name>
struct plain_action {
    using courier_action_tag = void;
    using traits = detail::function_traits<decltype(F)>;
    using result_type = typename detail::unwrap_future<typename traits::result>::type;
    using arguments = typename traits::args;
    static constexpr std::string_view name = Name.view();
    static constexpr std::uint64_t id = serialization::detail::fnv1a64(Name.view());
    static std::uint64_t wire_id() noexcept { return id; }

    static void invoke(serialization::input_archive& in, serialization::output_archive* out) {
        arguments args;
        try {
            detail::load_arguments(in, args);
        } catch (serialization::serialization_error const& e) {
            // A post's flat arguments that Courier's loaders cannot read, unless a chunk was
            // refused (over the receiver's limit, no memory): see detail::malformed_post.
            if (detail::all_flat_loadable<arguments>::value && out == nullptr && !in.refused()) {
                throw detail::malformed_post(e.what());
            }
            throw;
        }
        call(args, out);
    }
    /// invoke() for arguments that are all flat (detail::flat_invoker).
    static std::exception_ptr flat_invoke(serialization::flat_reader& in,
                                          serialization::output_archive* out) {
        arguments args;
        try {
            std::apply([&](auto&... a) { (in.load(a), ...); }, args);
            in.finish();
        } catch (serialization::serialization_error const&) {
            return std::current_exception();
        }
        call(args, out);
        return nullptr;
    }
    /// &flat_invoke when every argument type is flat_loadable, else null (register_action).
    static constexpr detail::flat_invoker flat_entry() noexcept {
        if constexpr (detail::all_flat_loadable<arguments>::value) {
            return &flat_invoke;
        } else {
            return nullptr;
        }
    }

private:
    static void call(arguments& args, serialization::output_archive* out) {
        if constexpr (detail::unwrap_future<typename traits::result>::is_future) {
            detail::request_context* ctx = detail::current_request();
            detail::reply_with(ctx, out, std::apply(F, args));
        } else if constexpr (std::is_void_v<result_type>) {
            std::apply(F, args);
        } else {
            detail::save_result(out, std::apply(F, args));
        }
    }
};

namespace detail {
template <class A>
concept action = requires {
    typename A::courier_action_tag;
};

/// An argument whose saved form never refers to the argument object itself once save()
/// returned: a number is copied into the index, and a serialize_buffer's zero-copy chunk
/// refers to its data, which the archive keeps alive through the buffer's owner. Such
/// arguments are saved straight from the caller's; any other (a vector's data may become a
/// zero-copy chunk, read after the call returned) from a pooled copy that the message keeps.
template <class T>
struct saved_by_value : std::bool_constant<std::is_arithmetic_v<T> || std::is_enum_v<T>> {};
template <class T>
struct saved_by_value<serialization::serialize_buffer<T>> : std::true_type {};

/// Saves each value of the tuple at `values` (a Refs) into `ar` (flat_arguments).
template <class Refs, class Archive>
void save_each(void const* values, Archive& ar) {
    std::apply([&](auto const&... a) { (ar.save(a), ...); }, *static_cast<Refs const*>(values));
}

/// Sends a request for Action with `args`; `complete` gets the reply (empty for a post).
template <class Action, class... Args>
void send_action(id_type const& target, std::function<void(std::error_code const&)> on_sent,
                 reply_handler complete, bool wants_reply, bool ordered, Args&&... args) {
    std::uint32_t src = get_locality_id(target);
    auto save_target = [&target](serialization::output_archive& out) {
        if constexpr (requires { Action::targets_component; }) {
            // The target itself, with credits: the component stays alive until the call
            // ran, even if the caller drops its id at once.
            out.save(target);
        } else {
            (void)target;
            (void)out;
        }
    };
    if constexpr (!requires { Action::targets_component; } &&
                  ((saved_by_value<std::decay_t<Args>>::value &&
                    serialization::flat_savable<std::decay_t<Args>>)&&...)) {
        if (!on_sent && !ordered) {
            // A post or call of numbers and small buffers: straight into its batch if one is
            // open, or as a batch of its own.
            using refs = std::tuple<std::decay_t<Args> const&...>;
            refs const r(args...);
            flat_arguments const flat{&r, &save_each<refs, serialization::flat_sizer>,
                                      &save_each<refs, serialization::flat_writer>,
                                      &save_each<refs, serialization::output_archive>};
            if (wants_reply ? send_call_flat(src, Action::wire_id(), flat, complete)
                            : send_post_flat(src, Action::wire_id(), flat)) {
                return;
            }
        }
    }
    if constexpr ((saved_by_value<std::decay_t<Args>>::value && ...)) {
        // No copy of the arguments (a pooled block and its reference counts per call).
        send_request(
            src, Action::wire_id(),
            [&](serialization::output_archive& out) {
                save_target(out);
                (out.save(std::as_const(args)), ...);
            },
            std::move(complete), std::move(on_sent), wants_reply, ordered);
    } else {
        using arguments = std::tuple<std::decay_t<Args>...>;
        auto payload = std::allocate_shared<arguments>(pool_allocator<arguments>{},
                                                       std::forward<Args>(args)...);
        send_request(
            src, Action::wire_id(),
            [&](serialization::output_archive& out) {
                out.keep_alive(payload); // pointer chunks reference the tuple until sent
                save_target(out);
                std::apply([&](auto const&... a) { (out.save(a), ...); }, *payload);
            },
            std::move(complete), std::move(on_sent), wants_reply, ordered);
    }
}

template <class Action, class... Args>
auto remote_call(id_type const& target, std::function<void(std::error_code const&)> on_sent,
                 bool ordered, Args&&... args) {
    using R = typename Action::result_type;
    auto st = make_state<R>();
    send_action<Action>(
        target, std::move(on_sent),
        reply_handler(&complete_call<R>, state_ptr<R>(st).detach(), flat_completion<R>()), true,
        ordered, std::forward<Args>(args)...);
    return future_access::make<R>(std::move(st));
}

/// A call whose caller wants no reply: no future state either.
template <class Action, class... Args>
void remote_post(id_type const& target, bool ordered, Args&&... args) {
    send_action<Action>(target, nullptr, reply_handler(), false, ordered,
                        std::forward<Args>(args)...);
}
} // namespace detail

template <detail::action Action, class... Args>
auto async(id_type const& target, Args&&... args) {
    return detail::remote_call<Action>(target, nullptr, false, std::forward<Args>(args)...);
}
template <detail::action Action, class... Args>
auto async(Action, id_type const& target, Args&&... args) {
    return detail::remote_call<Action>(target, nullptr, false, std::forward<Args>(args)...);
}
/// Like async; `cb(ec)` runs once the arguments have been sent (their buffers are reusable).
template <detail::action Action, class Callback, class... Args>
auto async_cb(id_type const& target, Callback&& cb, Args&&... args) {
    return detail::remote_call<Action>(target, std::forward<Callback>(cb), false,
                                       std::forward<Args>(args)...);
}
/// Fire and forget; a remote exception is logged on the target.
template <detail::action Action, class... Args>
void post(id_type const& target, Args&&... args) {
    detail::remote_post<Action>(target, false, std::forward<Args>(args)...);
}

// Ordering. Calls are not ordered: two calls from one locality to another may run in either
// order, or at once on two workers (parcels travel by different paths: coalesced, eager or
// by RMA read, and the target's workers take tasks in any order). Where order matters:
//   - wait for a call's future (or chain with then/dataflow) before making the next; or
//   - async_ordered / post_ordered: the ordered calls from one locality to one target run
//     one after another, each after the previous one has returned, in the order the calling
//     locality issued them (from one Courier thread: program order). Unordered calls are not
//     held back by them, nor they by unordered ones.
// An ordered call costs a sequence number on the way and, on the target, a lock and the
// re-ordering of early arrivals (benchmarks/RESULTS.md, "Reliability", for the figures); an
// ordered call that blocks holds up every later one from its caller.

/// Like async, but ordered with the caller's other ordered calls to `target` (see above).
template <detail::action Action, class... Args>
auto async_ordered(id_type const& target, Args&&... args) {
    return detail::remote_call<Action>(target, nullptr, true, std::forward<Args>(args)...);
}
/// Like post, but ordered with the caller's other ordered calls to `target` (see above).
template <detail::action Action, class... Args>
void post_ordered(id_type const& target, Args&&... args) {
    detail::remote_post<Action>(target, true, std::forward<Args>(args)...);
}

} // namespace courier

/// Defines the action type `name` for the function `f` and registers its wire id (the FNV-1a
/// hash of "name"). Use at namespace scope, once per program.
#define COURIER_PLAIN_ACTION(f, name)                                                              \
    using name = ::courier::plain_action<&f, ::courier::detail::fixed_string{#name}>;              \
    [[maybe_unused]] static bool const courier_action_registered_##name =                          \
        ::courier::detail::register_action(name::id, #name, &name::invoke, name::flat_entry())
