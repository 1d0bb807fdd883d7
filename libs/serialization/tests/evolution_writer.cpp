// SPDX-License-Identifier: BSL-1.0
// Writes the checkpoint files that evolution_test reads, with the OLD definitions of its types:
//   evolution_writer DIR   ->  DIR/unversioned_sample.ckpt, DIR/newer_than_reader.ckpt
// The files in tests/data/ were written by this program; evolution_test checks that the current
// definitions (evo::sample gained version 1 and a field) still read them.
#include <courier/serialization.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace evo {
struct sample { // unversioned here: evolution_test gives it version 1 and a new field
    int id = 0;
    std::string name;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& id& name;
    }
};
struct record { // an aggregate: no code
    std::vector<sample> samples;
    double time;
};
struct ahead { // version 3 here; the reader knows only version 1
    static constexpr unsigned courier_serialization_version = 3;
    int x = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& x;
    }
};
} // namespace evo

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    std::filesystem::path dir = argv[1];
    evo::record r{{{1, "one"}, {2, "two"}, {3, "three"}}, 0.5};
    namespace cs = courier::serialization;
    cs::save_to_file(dir / "unversioned_sample.ckpt", r, std::string("tail"));
    cs::save_to_file(dir / "newer_than_reader.ckpt", evo::ahead{7});
    return 0;
}
