// SPDX-License-Identifier: BSL-1.0
// The main job until the distributed runtime lands: what a Courier archive looks like.
// Serializes an RPC-like argument list (small values, a large vector, a serialize_buffer and a
// polymorphic pointer), prints its chunk list, loads it back, writes and reads a checkpoint.
#include <courier/courier.hpp>

#include <cstdio>
#include <filesystem>
#include <numeric>

namespace cs = courier::serialization;

namespace demo {
struct body {
    virtual ~body() = default;
    std::string name;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& name;
    }
};
struct planet : body {
    double mass = 0;
    std::vector<double> orbit;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::base_object<body>(*this) & mass& orbit;
    }
};
COURIER_SERIALIZATION_REGISTER_CLASS(planet);
} // namespace demo

namespace {
char const* kind(cs::chunk_type t) {
    switch (t) {
    case cs::chunk_type::index:
        return "index";
    case cs::chunk_type::pointer:
        return "pointer";
    case cs::chunk_type::rma:
        return "rma";
    }
    return "?";
}
} // namespace

int main() {
    std::vector<double> field(1 << 20); // 8 MiB
    std::iota(field.begin(), field.end(), 0.0);
    std::vector<char> raw(64 * 1024, 'x');
    cs::serialize_buffer<char> buffer(raw.data(), raw.size(),
                                      cs::serialize_buffer<char>::reference);
    std::unique_ptr<demo::body> earth = std::make_unique<demo::planet>();
    earth->name = "earth";
    static_cast<demo::planet&>(*earth).mass = 5.97e24;
    static_cast<demo::planet&>(*earth).orbit.assign(16, 1.0);
    std::string tag = "step 42";

    auto m = cs::save(tag, field, buffer, earth, 3.5);
    std::printf("message: %zu index bytes, %zu chunks, %zu bytes in total (threshold %zu)\n",
                m.index_size(), m.chunks().size(), m.total_size(), m.recorded_threshold());
    for (auto const& c : m.chunks()) {
        if (c.type == cs::chunk_type::index) {
            std::printf("  %-8s %10zu bytes at offset %zu of the index buffer\n", kind(c.type),
                        c.size, c.offset);
        } else {
            char const* whose =
                c.address == reinterpret_cast<std::byte const*>(field.data()) ? "field.data()"
                : c.address == reinterpret_cast<std::byte const*>(raw.data()) ? "raw.data()"
                                                                              : "?";
            std::printf("  %-8s %10zu bytes referencing %s (not copied)\n", kind(c.type), c.size,
                        whose);
        }
    }

    std::string tag2;
    std::vector<double> field2;
    cs::serialize_buffer<char> buffer2;
    std::unique_ptr<demo::body> body2;
    double d = 0;
    cs::load(m, tag2, field2, buffer2, body2, d);
    auto* p = dynamic_cast<demo::planet*>(body2.get());
    bool ok = tag2 == tag && field2 == field && buffer2 == buffer && p != nullptr &&
              p->name == "earth" && p->orbit.size() == 16 && d == 3.5;
    std::printf("loaded back: %s\n", ok ? "identical" : "MISMATCH");

    auto path = std::filesystem::temp_directory_path() / "courier_demo.ckpt";
    cs::save_to_file(path, tag, field);
    std::vector<double> field3;
    std::string tag3;
    cs::load_from_file(path, tag3, field3);
    std::printf("checkpoint %s: %ju bytes, read back %s\n", path.c_str(),
                static_cast<std::uintmax_t>(std::filesystem::file_size(path)),
                field3 == field && tag3 == tag ? "identical" : "MISMATCH");
    std::filesystem::remove(path);
    ok = ok && field3 == field;
    return ok ? 0 : 1;
}
