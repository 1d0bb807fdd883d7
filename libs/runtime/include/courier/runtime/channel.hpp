// SPDX-License-Identifier: BSL-1.0
// Distributed channels, as HPX's hpx::distributed::channel: a component that hands values from
// any locality to any locality, one per generation.
//
//   courier::distributed::channel<double> c(courier::find_here());
//   c.register_as("left_boundary").get();
//   courier::distributed::channel<double> d;
//   d.connect_to("left_boundary");          // usable at once: calls wait for the lookup
//   d.set(3.5, step);                       // fire and forget
//   double v = c.get(step).get();           // ready when generation `step` is set
//
// A value set before its get is kept on the channel's locality until a get takes it (memory
// goes with it); a get before its value waits there as a table entry (no thread, no worker).
// One value per generation: a second set of a generation nobody took yet is refused (logged,
// as a posted action's failure). Copies of a channel object share the channel; it lives while
// a copy (or its name) exists anywhere; gets still waiting when it goes fail (remote_exception).
#pragma once

#include <courier/runtime/components.hpp>
#include <courier/runtime/detail/task.hpp>
#include <courier/runtime/naming.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace courier::distributed {

namespace detail {

template <class T>
class channel_server : public component_base<channel_server<T>> {
public:
    channel_server() = default;
    channel_server(channel_server const&) = delete;
    channel_server& operator=(channel_server const&) = delete;
    /// The last reference is gone: gets still waiting fail rather than wait for ever.
    ~channel_server() {
        if (!courier::detail::runtime_running()) {
            return; // shutting down: no request can still be waiting (termination saw to it)
        }
        for (auto& [generation, waiters] : waiting_) {
            auto error = std::make_exception_ptr(
                std::runtime_error("courier: the channel was destroyed while a get of generation " +
                                   std::to_string(generation) + " waited"));
            for (auto const& w : waiters) {
                courier::detail::send_deferred_reply(
                    w, [](serialization::output_archive&) {}, error);
            }
        }
    }

    void set(T value, std::size_t generation) {
        courier::detail::request_context waiter;
        {
            std::lock_guard lk(mutex_);
            auto w = waiting_.find(generation);
            if (w == waiting_.end()) {
                if (!values_.emplace(generation, std::move(value)).second) {
                    throw std::invalid_argument("courier: channel generation " +
                                                std::to_string(generation) + " is already set");
                }
                return;
            }
            waiter = w->second.front();
            w->second.erase(w->second.begin());
            if (w->second.empty()) {
                waiting_.erase(w);
            }
        }
        courier::detail::send_deferred_result(waiter, std::move(value));
    }

    /// Writes the value of `generation` into `out` (taken and dropped when null: a posted
    /// get), or defers the reply until it is set.
    void get(std::size_t generation, courier::detail::request_context* ctx,
             serialization::output_archive* out) {
        std::unique_lock lk(mutex_);
        auto v = values_.find(generation);
        if (v != values_.end()) {
            auto value = std::make_shared<T>(std::move(v->second));
            values_.erase(v);
            lk.unlock();
            if (out != nullptr) {
                out->keep_alive(value);
                out->save(*value);
            }
            return;
        }
        if (ctx == nullptr || ctx->rid == 0) {
            throw std::invalid_argument("courier: a channel get with no caller");
        }
        ctx->deferred = true;
        waiting_[generation].push_back(*ctx);
    }

    /// Values set and not yet taken (for tests).
    std::size_t stored() {
        std::lock_guard lk(mutex_);
        return values_.size();
    }

private:
    std::mutex mutex_;
    std::map<std::size_t, T> values_;
    std::map<std::size_t, std::vector<courier::detail::request_context>> waiting_;
};

/// The channel component of the call: loads the target, then the arguments into `args` (a
/// tuple), checking the type.
template <class T, class Tuple>
std::shared_ptr<channel_server<T>> load_call(serialization::input_archive& in, Tuple& args) {
    id_type self;
    in.load(self);
    courier::detail::load_arguments(in, args);
    return std::static_pointer_cast<channel_server<T>>(
        courier::detail::find_component(self.lsb, typeid(channel_server<T>)));
}

template <class T>
struct channel_set_action {
    using courier_action_tag = void;
    static constexpr bool targets_component = true;
    using result_type = void;
    static constexpr char const* name = "courier::distributed::channel::set";
    static std::uint64_t wire_id() noexcept {
        static std::uint64_t const id = courier::detail::typed_action_id(name, typeid(T));
        (void)registered;
        return id;
    }
    static void invoke(serialization::input_archive& in, serialization::output_archive*) {
        std::tuple<T, std::size_t> args; // value, generation
        load_call<T>(in, args)->set(std::move(std::get<0>(args)), std::get<1>(args));
    }
    inline static bool const registered =
        courier::detail::register_action(wire_id(), name, &invoke);
};

template <class T>
struct channel_get_action {
    using courier_action_tag = void;
    static constexpr bool targets_component = true;
    using result_type = T;
    static constexpr char const* name = "courier::distributed::channel::get";
    static std::uint64_t wire_id() noexcept {
        static std::uint64_t const id = courier::detail::typed_action_id(name, typeid(T));
        (void)registered;
        return id;
    }
    static void invoke(serialization::input_archive& in, serialization::output_archive* out) {
        courier::detail::request_context* ctx = courier::detail::current_request();
        std::tuple<std::size_t> args; // generation
        load_call<T>(in, args)->get(std::get<0>(args), ctx, out);
    }
    inline static bool const registered =
        courier::detail::register_action(wire_id(), name, &invoke);
};

inline std::string channel_name(std::string const& name) {
    return "/courier/channel/" + name;
}

} // namespace detail

template <class T>
class channel {
public:
    /// Not connected: connect_to gives it a channel.
    channel() = default;
    /// A new channel living on `locality`.
    explicit channel(id_type const& locality)
        : id_(new_<detail::channel_server<T>>(locality).share()) {}

    /// Names the channel, so that connect_to(name) finds it.
    future<bool> register_as(std::string name) const {
        return id().then([n = detail::channel_name(name)](shared_future<id_type> f) {
            return register_with_basename(n, f.get(), 0);
        });
    }
    /// Uses the channel registered as `name`; calls made before it is found wait for it.
    void connect_to(std::string name) {
        id_ = find_from_basename(detail::channel_name(name), 0).share();
    }

    /// Sets `generation` to `value` (fire and forget).
    void set(T value, std::size_t generation = 0) const {
        auto const& target = id();
        if (target.is_ready()) {
            post<detail::channel_set_action<T>>(target.get(), std::move(value), generation);
            return;
        }
        (void)target.then([v = std::move(value), generation](shared_future<id_type> f) mutable {
            post<detail::channel_set_action<T>>(f.get(), std::move(v), generation);
        });
    }
    /// The value of `generation`, once it is set.
    future<T> get(std::size_t generation = 0) const {
        auto const& target = id();
        if (target.is_ready()) {
            return async<detail::channel_get_action<T>>(target.get(), generation);
        }
        return target.then([generation](shared_future<id_type> f) {
            return async<detail::channel_get_action<T>>(f.get(), generation);
        });
    }
    /// The channel's component id (waits until it is created or found).
    id_type get_id() const { return id().get(); }
    bool valid() const noexcept { return id_.valid(); }

private:
    shared_future<id_type> const& id() const {
        if (!id_.valid()) {
            throw std::logic_error("courier: a channel used before it was created or connected");
        }
        return id_;
    }
    shared_future<id_type> id_;
};

} // namespace courier::distributed
