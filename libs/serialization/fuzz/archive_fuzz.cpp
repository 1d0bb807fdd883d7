// SPDX-License-Identifier: BSL-1.0
// libFuzzer target: arbitrary bytes as (a) an archive's index buffer loaded as several types,
// (b) a checkpoint file image. Anything but serialization_error (a crash, a sanitizer report,
// an out-of-memory, a timeout) is a bug.
#include <courier/serialization.hpp>

#include <cstring>

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

template <class T>
void try_load(cs::message const& m) {
    try {
        T v{};
        cs::load(m, v);
    } catch (cs::serialization_error const&) {
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
            try_load<everything>(m);
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
    switch ((data[0] >> 1) % 4) {
    case 0:
        try_load<everything>(m);
        break;
    case 1:
        try_load<std::vector<std::shared_ptr<shape>>>(m);
        break;
    case 2:
        try_load<std::map<std::string, std::vector<std::optional<std::int64_t>>>>(m);
        break;
    default:
        try_load<std::vector<std::unique_ptr<std::forward_list<std::multiset<int>>>>>(m);
        break;
    }
    return 0;
}
