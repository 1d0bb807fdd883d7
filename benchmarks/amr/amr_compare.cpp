// SPDX-License-Identifier: BSL-1.0
// Compares two dumps of the AMR mini-app (results.hpp): the same tree, and every value within
// a relative tolerance of the largest magnitude of its variable.
//
//   amr_compare A.dump B.dump [--tolerance=1e-12]     exit 0 when they agree
#include "results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
    double tolerance = 1e-12;
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a.starts_with("--tolerance=")) {
            tolerance = std::strtod(a.data() + 12, nullptr);
        } else {
            files.emplace_back(a);
        }
    }
    if (files.size() != 2) {
        std::fprintf(stderr, "usage: amr_compare A.dump B.dump [--tolerance=1e-12]\n");
        return 2;
    }
    try {
        amr::dump a = amr::read_dump(files[0]), b = amr::read_dump(files[1]);
        if (a.s.n != b.s.n || a.s.base != b.s.base || a.leaves.size() != b.leaves.size()) {
            std::printf("amr compare: different shapes or leaf counts (%zu and %zu leaves)\n",
                        a.leaves.size(), b.leaves.size());
            return 1;
        }
        std::size_t cells = std::size_t(a.s.n) * a.s.n * a.s.n;
        double scale[amr::nvar] = {}, worst[amr::nvar] = {};
        std::size_t identical = 0, total = 0;
        for (std::size_t l = 0; l < a.leaves.size(); ++l) {
            if (a.leaves[l].key != b.leaves[l].key) {
                std::printf("amr compare: leaf %zu differs (keys %llx and %llx)\n", l,
                            static_cast<unsigned long long>(a.leaves[l].key),
                            static_cast<unsigned long long>(b.leaves[l].key));
                return 1;
            }
            for (std::size_t i = 0; i < a.leaves[l].cells.size(); ++i) {
                double x = a.leaves[l].cells[i], y = b.leaves[l].cells[i];
                std::size_t v = i / cells;
                scale[v] = std::max(scale[v], std::abs(x));
                worst[v] = std::max(worst[v], std::abs(x - y));
                identical += x == y ? 1 : 0;
                ++total;
            }
        }
        double relative = 0;
        for (int v = 0; v < amr::nvar; ++v) {
            relative = std::max(relative, scale[v] > 0 ? worst[v] / scale[v] : worst[v]);
        }
        bool ok = relative <= tolerance && a.step == b.step;
        std::printf("amr compare: %zu leaves, steps %llu and %llu, %zu of %zu values identical, "
                    "largest relative difference %.3g (tolerance %.3g): %s\n",
                    a.leaves.size(), static_cast<unsigned long long>(a.step),
                    static_cast<unsigned long long>(b.step), identical, total, relative, tolerance,
                    ok ? "agree" : "DIFFER");
        return ok ? 0 : 1;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
}
