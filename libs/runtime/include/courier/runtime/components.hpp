// SPDX-License-Identifier: BSL-1.0
// Components: objects with a global id, created on any locality, called through actions.
//
//   struct accumulator : courier::component_base<accumulator> {
//       void add(double x);  double total() const;
//       COURIER_COMPONENT_ACTION(accumulator, add, add_action);
//       COURIER_COMPONENT_ACTION(accumulator, total, total_action);
//   };
//   COURIER_REGISTER_COMPONENT(accumulator);
//   courier::id_type id = courier::new_<accumulator>(locality /*, ctor args */).get();
//   courier::async<accumulator::add_action>(id, 1.5).get();
//
// Calls on one component may run concurrently (like HPX): synchronize inside it if needed.
//
// Lifetime: a component lives until its last id_type is gone everywhere (or until shutdown).
// Credit-based reference counting, no message per copy: the component's locality hands out
// 2^48 credits with the id new_ returns; every id_type that leaves a process (an argument, a
// result, the target of a call) takes half of its holder's credits along; when the last
// id_type copy in a process is destroyed, that process's credits go back (one parcel); the
// component is destroyed when all credits are back. A holder down to one credit first asks
// the component's locality for more (one round trip per 47 hops of a chain, or per 47 calls
// through one holder). get_id() inside the component returns a new counted reference. Credits in a
// message that is never delivered (a dead locality) are lost: the component then lives until
// shutdown. Wire ids of component actions and constructors come from the type's name as the
// compiler spells it (typeid): identical in every process of one program.
#pragma once

#include <courier/runtime/actions.hpp>

#include <memory>
#include <typeinfo>

namespace courier {

namespace detail {
/// Stores `obj` (of dynamic type `type`) on this locality; returns its id.
id_type register_component(std::shared_ptr<void> obj, std::type_info const& type);
/// The component `lsb` on this locality, checked to be a `type`; throws std::invalid_argument.
std::shared_ptr<void> find_component(std::uint64_t lsb, std::type_info const& type);
/// A new counted reference to the component `id` of this locality (unmanaged if it is gone).
id_type new_reference(id_type const& id);

template <class M>
struct member_traits;
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...)> {
    using object = C;
    using result = R;
    using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) const> : member_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) noexcept> : member_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) const noexcept> : member_traits<R (C::*)(A...)> {};

} // namespace detail

template <class T>
class component_base {
public:
    /// A counted reference to this component (keeps it alive while it exists anywhere).
    id_type get_id() const { return detail::new_reference(id_); }

private:
    template <class U, class... A>
    friend struct create_component_action;
    id_type id_;
};

/// The action behind COURIER_COMPONENT_ACTION: calls member M on the target component.
template <auto M, detail::fixed_string Name>
struct component_action {
    using courier_action_tag = void;
    static constexpr bool targets_component = true;
    using traits = detail::member_traits<decltype(M)>;
    using object = typename traits::object;
    using result_type = typename detail::unwrap_future<typename traits::result>::type;
    using arguments = typename traits::args;
    static constexpr std::string_view name = Name.view();

    static std::uint64_t wire_id() noexcept {
        (void)registered;
        return serialization::detail::fnv1a64(Name.view());
    }
    static void invoke(serialization::input_archive& in, serialization::output_archive* out) {
        id_type self; // holds the call's credits until the call has run
        in.load(self);
        std::uint64_t lsb = self.lsb;
        arguments args;
        detail::load_arguments(in, args);
        auto obj = std::static_pointer_cast<object>(detail::find_component(lsb, typeid(object)));
        if constexpr (detail::unwrap_future<typename traits::result>::is_future) {
            detail::request_context* ctx = detail::current_request();
            detail::reply_with(ctx, out,
                               std::apply([&](auto&... a) { return ((*obj).*M)(a...); }, args));
        } else if constexpr (std::is_void_v<result_type>) {
            std::apply([&](auto&... a) { ((*obj).*M)(a...); }, args);
        } else {
            detail::save_result(out,
                                std::apply([&](auto&... a) { return ((*obj).*M)(a...); }, args));
        }
    }
    inline static bool const registered =
        detail::register_action(serialization::detail::fnv1a64(Name.view()), Name.value, &invoke);
};

/// Creates a T from Args on the target locality; yields its id.
template <class T, class... Args>
struct create_component_action {
    using courier_action_tag = void;
    using result_type = id_type;

    static std::uint64_t wire_id() noexcept {
        static std::uint64_t const id =
            detail::typed_action_id(typeid(T).name(), typeid(std::tuple<Args...>));
        (void)registered;
        return id;
    }
    static void invoke(serialization::input_archive& in, serialization::output_archive* out) {
        std::tuple<Args...> args;
        detail::load_arguments(in, args);
        auto obj = std::apply([](auto&... a) { return std::make_shared<T>(a...); }, args);
        id_type id = detail::register_component(obj, typeid(T));
        static_cast<component_base<T>&>(*obj).id_ = id_type{id.msb, id.lsb, nullptr}; // no credits
        if (out != nullptr) {
            out->save(id);
        }
    }
    inline static bool const registered =
        detail::register_action(wire_id(), typeid(T).name(), &invoke);
};

/// Components alive on this locality.
std::size_t get_component_count();

/// Creates a component of type T on `locality` from `args`.
template <class T, class... Args>
future<id_type> new_(id_type const& locality, Args&&... args) {
    static_assert(std::is_base_of_v<component_base<T>, T>,
                  "components derive from courier::component_base<T>");
    return async<create_component_action<T, std::decay_t<Args>...>>(locality,
                                                                    std::forward<Args>(args)...);
}

} // namespace courier

/// Declares the action `name` calling member `method` of component `T`. Use inside T.
#define COURIER_COMPONENT_ACTION(T, method, name)                                                  \
    using name =                                                                                   \
        ::courier::component_action<&T::method, ::courier::detail::fixed_string{#T "::" #name}>

/// Checks that T is a component. Use at namespace scope after T's definition.
#define COURIER_REGISTER_COMPONENT(T)                                                              \
    static_assert(std::is_base_of_v<::courier::component_base<T>, T>,                              \
                  #T " must derive from courier::component_base<" #T ">")
