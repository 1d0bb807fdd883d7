// SPDX-License-Identifier: BSL-1.0
// Deep copy (MEL, seeds 000/001): pointer structures move given only their root.
//
//   struct node {
//       double* payload = nullptr; std::size_t n = 0;   // an owned dynamic array
//       node* left = nullptr; node* right = nullptr;     // nodes others may share
//       template <class A> void serialize(A& ar, unsigned) {
//           ar & array(payload, n) & shared(left) & shared(right);
//       }
//   };
//   auto m = save(deep_copy_options(deep_mode::adaptive), shared(root));
//   node* copy = nullptr;  load(m, shared(copy));           // the whole graph, rebuilt
//
// - array(ptr, len): writes len and the elements; loads with new T[len]. nullptr stays nullptr.
//   Bitwise elements form one block: a pointer chunk when the mode says so (below).
// - shared(ptr): a node other pointers may share. Each distinct node travels once (tracked by
//   address with detail::pointer_map on the sender, by arrival order on the receiver); identity,
//   aliasing, self-loops and cycles survive. Nodes are written breadth first from a queue, not
//   by recursion: a list of a million nodes needs the stack of one node. Loads with new T (T
//   default-constructible or befriending serialization::access). Non-polymorphic T.
// - std::shared_ptr<T> is tracked the same way (types/pointers.hpp); std::unique_ptr owns.
// Wire format: array: varint (0 = null, else len + 1), then for bitwise elements one byte
// (1 = they are the next pointer chunk, 0 = inline), then the elements. shared: varint
// (0 = null, 1 = a new node, k >= 2 = node number k - 2); the contents of new nodes follow,
// in the order the nodes were first met, after the outermost shared() that reached them.
//
// Modes (MEL's, as archive options, deep_copy_options()): *buffered* packs everything into
// index chunks; *non_buffered* makes every non-empty bitwise array its own pointer chunk (no
// packing copy); *adaptive* (the default) decides per allocation: arrays at or above
// `adaptive_threshold` bytes are pointer chunks, smaller ones are packed. Other blocks (a
// std::vector inside a node) follow the archive's zero-copy threshold as always.
//
// Bad input and failure: counts and sizes are checked before allocating; load_limits caps the
// nodes and bytes one load may allocate. If a load fails midway, every node and array it
// allocated is freed and the caller's pointer is left null: the loader first resets every
// pointer it assigned inside memory it allocated (and the top-level pointer), then deletes what
// it allocated, so no destructor follows a half-built pointer. Arrays assigned to a pointer in
// memory the load does not own (say, inside a std::vector element) belong to that object from
// then on, as they would after a successful load.
#pragma once

#include <courier/serialization/detail/tracking.hpp>
#include <courier/serialization/polymorphic.hpp>
#include <courier/serialization/serializer.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace courier::serialization {

template <class T, class Size>
struct array_ref {
    static_assert(std::is_integral_v<Size>, "array(ptr, len): len must be an integer");
    T*& ptr;
    Size& len;
};
template <class T>
struct shared_ref {
    static_assert(!std::is_polymorphic_v<T>,
                  "shared(T*&) supports non-polymorphic T; use std::shared_ptr<Base> for "
                  "polymorphic nodes");
    T*& ptr;
};

/// A std::vector of node pointers, each a shared() node (adjacency lists of graphs).
template <class T, class A>
struct shared_vector_ref {
    std::vector<T*, A>& v;
};

/// An owned dynamic array of `len` elements at `ptr`, for deep copy.
template <class T, class Size>
array_ref<T, Size> array(T*& ptr, Size& len) {
    return {ptr, len};
}
/// A node that other pointers may share, for deep copy.
template <class T>
shared_ref<T> shared(T*& ptr) {
    return {ptr};
}
/// Every element of `v` is a shared() node: `ar & shared(neighbours)`.
template <class T, class A>
shared_vector_ref<T, A> shared(std::vector<T*, A>& v) {
    return {v};
}

enum class deep_mode : std::uint8_t { buffered, non_buffered, adaptive };

/// Arrays at or above this many bytes become pointer chunks in adaptive mode, in memory and in
/// files (below it, packing costs less than a chunk; benchmarks/deep_copy). Actions send deep
/// arrays with `--courier:deep_array_threshold` (default: the zero-copy threshold).
inline constexpr std::size_t adaptive_threshold = 1024;

/// Archive options for a deep-copy mode, on top of `base` (pointer tracking and so on).
inline options deep_copy_options(deep_mode m, options base = default_options()) {
    switch (m) {
    case deep_mode::buffered:
        base.zero_copy = false;
        break;
    case deep_mode::non_buffered:
        base.zero_copy = true;
        base.deep_array_threshold = 1;
        break;
    case deep_mode::adaptive:
        base.zero_copy = true;
        base.deep_array_threshold = adaptive_threshold;
        break;
    }
    return base;
}

template <class T, class Size>
struct serializer<array_ref<T, Size>> {
    static void save(output_archive& ar, array_ref<T, Size> const& a) {
        if (a.ptr == nullptr) {
            ar.save_size(0);
            return;
        }
        auto n = static_cast<std::uint64_t>(a.len);
        ar.save_size(n + 1);
        if constexpr (is_bitwise_serializable_v<T>) {
            // One byte says where the elements are: 1 = the next pointer chunk, 0 = inline.
            std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
            bool external = bytes != 0 && ar.is_deep_external(bytes);
            ar.save_value(static_cast<std::uint8_t>(external));
            if (external) {
                ar.save_external_block(a.ptr, bytes);
            } else {
                ar.save_bytes(a.ptr, bytes);
            }
        } else {
            for (std::uint64_t i = 0; i < n; ++i) {
                ar.save(a.ptr[i]);
            }
        }
    }
    static void load(input_archive& ar, array_ref<T, Size> const& a) {
        bool top = ar.is_top_level(&a);
        a.ptr = nullptr;
        a.len = 0;
        std::uint64_t tag = ar.load_size();
        if (tag == 0) {
            return;
        }
        std::uint64_t n = tag - 1;
        ar.check_count(n, min_wire_size<T>::value);
        if (n > static_cast<std::uint64_t>(std::numeric_limits<Size>::max())) {
            ar.fail("array length " + std::to_string(n) + " does not fit its length type");
        }
        std::size_t count = static_cast<std::size_t>(n);
        ar.count_deep_allocation(count * sizeof(T));
        // Bitwise elements are overwritten whole by the load below (and a failed load frees the
        // array unread): no zero-filling pass. Other elements are value-initialized first.
        T* p = count == 0                     ? new T[1]()
               : is_bitwise_serializable_v<T> ? new T[count]
                                              : new T[count]();
        auto id = ar.register_allocation(p, count * sizeof(T) + (count == 0 ? sizeof(T) : 0),
                                         [](void* q) { delete[] static_cast<T*>(q); });
        if constexpr (is_bitwise_serializable_v<T>) {
            auto where = ar.load_value<std::uint8_t>();
            if (where == 1) {
                ar.load_external_block(p, count * sizeof(T));
            } else if (where == 0) {
                ar.load_bytes(p, count * sizeof(T));
            } else {
                ar.fail("array(): bad placement byte " + std::to_string(where));
            }
        } else {
            ar.begin_stable_range(p, count * sizeof(T));
            try {
                for (std::size_t i = 0; i < count; ++i) {
                    ar.load(p[i]);
                }
            } catch (...) {
                ar.end_stable_range();
                throw;
            }
            ar.end_stable_range();
        }
        a.ptr = p;
        a.len = static_cast<Size>(n);
        if (!ar.record_slot(&a.ptr, top, [](void* s) { *static_cast<T**>(s) = nullptr; })) {
            ar.release_allocation(id); // the object holding the pointer owns the array now
        }
    }
};

template <class T>
struct serializer<shared_ref<T>> {
    static void save(output_archive& ar, shared_ref<T> const& s) {
        if (s.ptr == nullptr) {
            ar.save_size(0);
            return;
        }
        auto [number, first] = ar.tracking().insert(s.ptr);
        if (!first) {
            ar.save_size(number + 2);
            return;
        }
        ar.save_size(1);
        ar.defer_node(s.ptr,
                      [](output_archive& a, void const* p) { a.save(*static_cast<T const*>(p)); });
    }
    static void load(input_archive& ar, shared_ref<T> const& s) {
        bool top = ar.is_top_level(&s);
        s.ptr = nullptr;
        std::uint64_t tag = ar.load_size();
        if (tag == 0) {
            return;
        }
        auto& objects = ar.tracking();
        if (tag == 1) {
            ar.count_deep_allocation(sizeof(T));
            T* obj = access::create<T>();
            ar.register_allocation(obj, sizeof(T), [](void* q) { delete static_cast<T*>(q); });
            objects.add({obj, &typeid(T), nullptr, nullptr}); // before its contents: cycles
            s.ptr = obj;
            ar.record_slot(&s.ptr, top, [](void* p) { *static_cast<T**>(p) = nullptr; });
            ar.defer_node(obj, sizeof(T),
                          [](input_archive& a, void* p) { a.load(*static_cast<T*>(p)); });
            return;
        }
        std::uint64_t number = tag - 2;
        if (number >= objects.size()) {
            ar.fail("shared() refers to node #" + std::to_string(number) + ", but only " +
                    std::to_string(objects.size()) + " nodes were read so far");
        }
        auto const& o = objects[number];
        if (o.owner || *o.type != typeid(T)) {
            ar.fail("shared(" + detail::demangle(typeid(T).name()) + "*) refers to node #" +
                    std::to_string(number) + " of another kind (" +
                    detail::demangle(o.type->name()) + (o.owner ? ", shared_ptr-owned" : "") + ")");
        }
        s.ptr = static_cast<T*>(o.address);
        ar.record_slot(&s.ptr, top, [](void* p) { *static_cast<T**>(p) = nullptr; });
    }
};

template <class T, class A>
struct serializer<shared_vector_ref<T, A>> {
    static void save(output_archive& ar, shared_vector_ref<T, A> const& s) {
        ar.save_size(s.v.size());
        for (T*& p : s.v) {
            ar.save(shared(p));
        }
    }
    static void load(input_archive& ar, shared_vector_ref<T, A> const& s) {
        std::size_t n = ar.load_count(1);
        s.v.clear();
        s.v.resize(n, nullptr); // no reallocation below: the element slots stay where they are
        for (T*& p : s.v) {
            ar.load(shared(p));
        }
    }
};

template <class T, class A>
struct min_wire_size<shared_vector_ref<T, A>> : std::integral_constant<std::size_t, 1> {};
template <class T, class Size>
struct min_wire_size<array_ref<T, Size>> : std::integral_constant<std::size_t, 1> {};
template <class T>
struct min_wire_size<shared_ref<T>> : std::integral_constant<std::size_t, 1> {};

} // namespace courier::serialization
