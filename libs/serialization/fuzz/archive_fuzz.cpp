// SPDX-License-Identifier: BSL-1.0
// libFuzzer target: arbitrary bytes as (a) an archive's index buffer loaded as several types
// (standard containers, polymorphic pointers, aggregates, weak_ptr graphs, deep-copy graphs of
// raw pointers), (b) a checkpoint file image (segments, type table) loaded the same ways.
// Anything but serialization_error (a crash, a sanitizer report, a leak, an out-of-memory, a
// timeout) is a bug.
#include <courier/serialization.hpp>

#include <cstring>
#include <set>

namespace cs = courier::serialization;

namespace {

struct shape {
    virtual ~shape() = default;
    int id = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id;
    }
};
struct circle : shape {
    double r = 0;
    std::vector<int> v;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<shape>(*this) & r& v;
    }
};
COURIER_SERIALIZATION_REGISTER_CLASS(circle);

struct everything {
    std::vector<std::string> names;
    std::map<int, std::vector<double>> table;
    std::optional<std::variant<int, std::string, std::monostate>> choice;
    std::shared_ptr<std::string> a, b;
    std::unique_ptr<shape> poly;
    std::shared_ptr<shape> spoly;
    std::vector<bool> flags;
    std::unordered_set<std::string> set;
    std::list<std::pair<int, std::string>> pairs;
    std::bitset<12> bits;
    cs::serialize_buffer<double> buffer;
    std::vector<std::monostate> empties;
    std::deque<std::tuple<char, std::u16string>> tuples;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& names& table& choice& a& b& poly& spoly& flags& set& pairs& bits& buffer& empties&
            tuples;
    }
};

// Aggregates (no code) holding weak and shared pointers: a forest whose nodes own their
// children (unique_ptr) and point weakly at shared roots. Ownership cycles of shared_ptrs
// reachable only through weak pointers would leak by construction (serializer<weak_ptr> in
// pointers.hpp), so the roots own nothing shared.
struct tree {
    int value = 0;
    std::vector<std::unique_ptr<tree>> children;
    std::weak_ptr<tree> root;
};
struct forest {
    std::vector<std::shared_ptr<tree>> roots;
    std::array<std::uint16_t, 3> dims;
    std::optional<std::string> label;
};

// Deep copy: a graph of raw pointers (cycles allowed) with owned arrays.
struct gnode {
    int id = 0;
    gnode* next = nullptr;
    gnode* other = nullptr;
    double* data = nullptr;
    std::uint32_t n = 0;
    ~gnode() { delete[] data; } // owns its array, not its neighbours
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id& cs::shared(next) & cs::shared(other) & cs::array(data, n);
    }
};

void free_graph(gnode* root) {
    std::set<gnode*> seen;
    std::vector<gnode*> todo{root};
    while (!todo.empty()) {
        gnode* g = todo.back();
        todo.pop_back();
        if (g == nullptr || !seen.insert(g).second) {
            continue;
        }
        todo.push_back(g->next);
        todo.push_back(g->other);
    }
    for (gnode* g : seen) {
        delete g;
    }
}

template <class T>
void try_load(cs::message const& m) {
    try {
        T v{};
        cs::load(m, v);
    } catch (cs::serialization_error const&) {
    }
}

void try_load_graph(cs::message const& m) {
    gnode* root = nullptr;
    try {
        cs::load(m, cs::shared(root)); // on failure the load frees what it built
    } catch (cs::serialization_error const&) {
    }
    free_graph(root);
}

void try_load_forest(cs::message const& m) {
    try {
        forest f;
        cs::load(m, f);
    } catch (cs::serialization_error const&) {
    }
}

void load_each_way(cs::message const& m, unsigned way) {
    switch (way % 7) {
    case 0:
        try_load<everything>(m);
        break;
    case 1:
        try_load<std::vector<std::shared_ptr<shape>>>(m);
        break;
    case 2:
        try_load<std::map<std::string, std::vector<std::optional<std::int64_t>>>>(m);
        break;
    case 3:
        try_load<std::vector<std::unique_ptr<std::forward_list<std::multiset<int>>>>>(m);
        break;
    case 4:
        try_load_graph(m);
        break;
    case 5:
        try_load_forest(m);
        break;
    default:
        try_load<std::vector<std::weak_ptr<std::string>>>(m);
        break;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    std::span<std::byte const> bytes(reinterpret_cast<std::byte const*>(data + 1), size - 1);
    if (data[0] & 1) {
        std::shared_ptr<std::byte[]> copy(new std::byte[bytes.size()]);
        if (!bytes.empty()) {
            std::memcpy(copy.get(), bytes.data(), bytes.size());
        }
        try {
            auto m = cs::checkpoint_from_bytes(copy, bytes.size());
            load_each_way(m, data[0] >> 1);
        } catch (cs::serialization_error const&) {
        }
        return 0;
    }
    cs::message m;
    try {
        m = cs::message::from_bytes(bytes);
    } catch (cs::serialization_error const&) {
        return 0;
    }
    load_each_way(m, data[0] >> 1);
    return 0;
}
