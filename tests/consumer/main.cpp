// SPDX-License-Identifier: BSL-1.0
// Uses the installed headers and library: a round trip with a pointer chunk and a checkpoint.
#include <courier/courier.hpp>

#include <cstdio>
#include <filesystem>

int main() {
    namespace cs = courier::serialization;
    std::vector<double> field(10000, 1.25);
    std::map<std::string, int> meta{{"step", 7}};
    auto m = cs::save(field, meta);
    std::vector<double> f2;
    std::map<std::string, int> m2;
    cs::load(m, f2, m2);
    auto path = std::filesystem::temp_directory_path() / "courier_consumer.ckpt";
    cs::save_to_file(path, field);
    std::vector<double> f3;
    cs::load_from_file(path, f3);
    std::filesystem::remove(path);
    bool ok = f2 == field && m2 == meta && f3 == field && m.external_chunk_count() == 1;
    std::printf("consumer: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
