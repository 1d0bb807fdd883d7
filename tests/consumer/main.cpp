// SPDX-License-Identifier: BSL-1.0
// Uses the installed headers and libraries: a round trip with a pointer chunk and a checkpoint,
// and an rma_vector (registered memory pool) that serializes as an rma chunk.
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
    courier::rma_vector<double> rv(10000, 2.5);
    auto rm = cs::save(rv);
    courier::rma_vector<double> rv2;
    cs::load(rm, rv2);
    bool rma_ok = rv2 == rv && rm.chunks().size() == 2 &&
                  rm.chunks()[1].type == cs::chunk_type::rma &&
                  courier::rma::contains(rv2.data(), rv2.size() * sizeof(double));
    bool ok = f2 == field && m2 == meta && f3 == field && m.external_chunk_count() == 1 && rma_ok;
    std::printf("consumer: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
