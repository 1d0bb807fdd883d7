// SPDX-License-Identifier: BSL-1.0
// Polymorphic pointers: a registry of classes keyed by a stable id (FNV-1a of the registered
// name, never registration order), and the upcasts the loader needs to turn a freshly built
// Derived into the Base the caller asked for.
//
//   struct circle : shape { ... template <class A> void serialize(A& a, unsigned) {
//       a & base_object<shape>(*this) & radius; } };
//   COURIER_SERIALIZATION_REGISTER_CLASS(circle);   // any namespace scope, once per program
//
// Registration happens during static initialization; lookups are thread-safe. Saving an object
// whose dynamic type is not registered, or loading an id that is unknown or not derived from the
// requested base, throws serialization_error.
#pragma once

#include <courier/serialization/detail/hash.hpp>
#include <courier/serialization/detail/tracking.hpp>
#include <courier/serialization/serializer.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <typeinfo>

namespace courier::serialization::detail {

struct polymorphic_entry {
    std::uint64_t id;
    char const* name;
    std::type_info const* type;
    void (*save)(output_archive&, void const*);
    void* (*create)();
    void (*load)(input_archive&, void*);
    void (*destroy)(void*);
    void (*throw_as)(void*); // throws the object as a pointer to its own type (generic upcast)
    void (*clear)(void*);    // empties the object after a failed load (load_tracking), or null
};

/// Registers `e`; a second registration of the same type or a clash of ids aborts at startup
/// with a message naming both classes.
void register_polymorphic(polymorphic_entry const& e);
polymorphic_entry const* find_polymorphic(std::type_info const& t) noexcept;
polymorphic_entry const* find_polymorphic(std::uint64_t id) noexcept;
/// Applies the registered chain of upcasts from `from` to `to`; nullptr if none is registered.
void* registered_upcast(void* p, std::type_info const& from, std::type_info const& to);
std::string demangle(char const* mangled);
[[noreturn]] void throw_unregistered(std::type_info const& t);

template <class T>
struct polymorphic_functions {
    static void save(output_archive& ar, void const* p) {
        serializer<T>::save(ar, *static_cast<T const*>(p));
    }
    static void* create() { return access::create<T>(); }
    static void load(input_archive& ar, void* p) { serializer<T>::load(ar, *static_cast<T*>(p)); }
    static void destroy(void* p) { delete static_cast<T*>(p); }
    static void throw_as(void* p) { throw static_cast<T*>(p); }
};

template <class T>
bool register_class(std::string_view name) {
    static_assert(std::is_polymorphic_v<T>, "only polymorphic classes need registration");
    register_polymorphic({fnv1a64(name), name.data(), &typeid(T), &polymorphic_functions<T>::save,
                          &polymorphic_functions<T>::create, &polymorphic_functions<T>::load,
                          &polymorphic_functions<T>::destroy, &polymorphic_functions<T>::throw_as,
                          clear_function<T>()});
    return true;
}

/// The object at `p` (built as `e`'s type) seen as a To, or nullptr if it is not a To.
template <class To>
To* upcast(void* p, polymorphic_entry const& e) {
    if (*e.type == typeid(To)) {
        return static_cast<To*>(p);
    }
    if (void* q = registered_upcast(p, *e.type, typeid(To))) {
        return static_cast<To*>(q);
    }
    // No base_object<> chain was registered: let the exception machinery do the conversion.
    try {
        e.throw_as(p);
    } catch (To* q) {
        return q;
    } catch (...) {
    }
    return nullptr;
}

/// Writes the object `obj` refers to: for polymorphic T, its registered id and then its
/// most-derived contents.
template <class T>
void save_pointee(output_archive& ar, T const& obj) {
    if constexpr (std::is_polymorphic_v<T>) {
        auto const* e = find_polymorphic(typeid(obj));
        if (e == nullptr) {
            throw_unregistered(typeid(obj));
        }
        ar.save_value(e->id);
        e->save(ar, dynamic_cast<void const*>(&obj));
    } else {
        ar.save(obj);
    }
}

/// Reads the polymorphic id and builds an empty object of that type, checked to be a T.
template <class T>
std::pair<void*, polymorphic_entry const*> create_polymorphic(input_archive& ar, T** typed) {
    auto id = ar.load_value<std::uint64_t>();
    auto const* e = find_polymorphic(id);
    if (e == nullptr) {
        ar.fail("unknown polymorphic type id " + std::to_string(id) + " (expected a " +
                demangle(typeid(T).name()) + " or a registered class derived from it)");
    }
    void* raw = e->create();
    *typed = upcast<T>(raw, *e);
    if (*typed == nullptr) {
        e->destroy(raw);
        ar.fail(std::string("polymorphic type '") + e->name + "' is not a " +
                demangle(typeid(T).name()));
    }
    return {raw, e};
}

} // namespace courier::serialization::detail

#define COURIER_DETAIL_CAT2(a, b) a##b
#define COURIER_DETAIL_CAT(a, b) COURIER_DETAIL_CAT2(a, b)

/// Registers a polymorphic class for (de)serialization through base pointers. Use once per
/// class, at any namespace scope; the id is the hash of the name as written here.
#define COURIER_SERIALIZATION_REGISTER_CLASS(T)                                                    \
    [[maybe_unused]] static bool const COURIER_DETAIL_CAT(courier_registered_class_,               \
                                                          __COUNTER__) =                           \
        ::courier::serialization::detail::register_class<T>(#T)
