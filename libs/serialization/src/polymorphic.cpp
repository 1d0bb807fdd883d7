// SPDX-License-Identifier: BSL-1.0
// The polymorphic class registry and the upcast graph built from base_object<> uses.
#include <courier/serialization/polymorphic.hpp>

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <typeindex>
#include <unordered_map>
#include <vector>

namespace courier::serialization::detail {

namespace {

struct registry {
    std::shared_mutex mutex;
    std::unordered_map<std::uint64_t, polymorphic_entry> by_id;
    std::unordered_map<std::type_index, std::uint64_t> id_by_type;
    // derived -> (base, cast)
    std::unordered_map<std::type_index, std::vector<std::pair<std::type_index, void* (*)(void*)>>>
        bases;
    // (from, to) -> chain of casts; an empty chain caches "no path"
    std::map<std::pair<std::type_index, std::type_index>, std::vector<void* (*)(void*)>> paths;
};

registry& the_registry() {
    static registry r; // constructed on first use: safe during static initialization
    return r;
}

} // namespace

std::string demangle(char const* mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> s(
        abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    return status == 0 && s ? std::string(s.get()) : std::string(mangled);
}

void register_polymorphic(polymorphic_entry const& e) {
    auto& r = the_registry();
    std::unique_lock lock(r.mutex);
    if (auto it = r.id_by_type.find(*e.type); it != r.id_by_type.end()) {
        if (it->second == e.id) {
            return; // the same registration seen from two translation units
        }
        std::fprintf(stderr,
                     "courier::serialization: class %s registered twice under different names "
                     "('%s' and '%s')\n",
                     demangle(e.type->name()).c_str(), r.by_id.at(it->second).name, e.name);
        std::abort();
    }
    if (auto it = r.by_id.find(e.id); it != r.by_id.end()) {
        std::fprintf(stderr,
                     "courier::serialization: type id clash: '%s' and '%s' hash to %llu; "
                     "register one of them under another name\n",
                     it->second.name, e.name, static_cast<unsigned long long>(e.id));
        std::abort();
    }
    r.by_id.emplace(e.id, e);
    r.id_by_type.emplace(*e.type, e.id);
}

polymorphic_entry const* find_polymorphic(std::type_info const& t) noexcept {
    auto& r = the_registry();
    std::shared_lock lock(r.mutex);
    auto it = r.id_by_type.find(t);
    return it == r.id_by_type.end() ? nullptr : &r.by_id.find(it->second)->second;
}

polymorphic_entry const* find_polymorphic(std::uint64_t id) noexcept {
    auto& r = the_registry();
    std::shared_lock lock(r.mutex);
    auto it = r.by_id.find(id);
    return it == r.by_id.end() ? nullptr : &it->second;
}

void register_upcast(std::type_info const& derived, std::type_info const& base,
                     void* (*cast)(void*)) {
    auto& r = the_registry();
    std::unique_lock lock(r.mutex);
    auto& edges = r.bases[derived];
    for (auto const& [b, c] : edges) {
        if (b == std::type_index(base)) {
            return;
        }
    }
    edges.emplace_back(base, cast);
    r.paths.clear();
}

void* registered_upcast(void* p, std::type_info const& from, std::type_info const& to) {
    auto& r = the_registry();
    std::pair key{std::type_index(from), std::type_index(to)};
    std::vector<void* (*)(void*)> chain;
    {
        std::shared_lock lock(r.mutex);
        if (auto it = r.paths.find(key); it != r.paths.end()) {
            chain = it->second;
        }
    }
    if (chain.empty()) {
        // Breadth-first search over derived->base edges, then cache the chain.
        std::unique_lock lock(r.mutex);
        std::map<std::type_index, std::pair<std::type_index, void* (*)(void*)>> parent;
        std::deque<std::type_index> todo{key.first};
        bool found = false;
        while (!todo.empty() && !found) {
            auto t = todo.front();
            todo.pop_front();
            auto it = r.bases.find(t);
            if (it == r.bases.end()) {
                continue;
            }
            for (auto const& [b, c] : it->second) {
                if (!parent.contains(b) && b != key.first) {
                    parent.emplace(b, std::pair{t, c});
                    if (b == key.second) {
                        found = true;
                        break;
                    }
                    todo.push_back(b);
                }
            }
        }
        if (!found) {
            return nullptr;
        }
        for (auto t = key.second; t != key.first;) {
            auto const& [prev, c] = parent.at(t);
            chain.insert(chain.begin(), c);
            t = prev;
        }
        r.paths[key] = chain;
    }
    for (auto c : chain) {
        p = c(p);
    }
    return p;
}

void throw_unregistered(std::type_info const& t) {
    throw serialization_error("courier::serialization: polymorphic type " + demangle(t.name()) +
                              " is not registered: add COURIER_SERIALIZATION_REGISTER_CLASS(" +
                              demangle(t.name()) + ")");
}

std::string version_error(unsigned found, unsigned known, char const* type) {
    return "data of " + demangle(type) + " has class version " + std::to_string(found) +
           ", newer than this program's version " + std::to_string(known);
}

} // namespace courier::serialization::detail
