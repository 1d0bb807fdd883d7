// SPDX-License-Identifier: BSL-1.0
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace courier::detail {

template <class Signature>
class function_ref;

/// A non-owning reference to a callable, for a callback invoked before the call that received
/// it returns: unlike std::function it never allocates (a lambda capturing more than 16 bytes
/// did, once per remote call). The callable must outlive every call through the reference.
template <class R, class... A>
class function_ref<R(A...)> {
public:
    template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> &&
             std::is_invocable_r_v<R, F&, A...>) function_ref(F&& f)
    noexcept // NOLINT(google-explicit-constructor): used like std::function
        : object_(const_cast<void*>(static_cast<void const*>(std::addressof(f)))),
          call_([](void* o, A... a) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...);
          }) {}

    R operator()(A... a) const { return call_(object_, std::forward<A>(a)...); }

private:
    void* object_;
    R (*call_)(void*, A...);
};

} // namespace courier::detail
