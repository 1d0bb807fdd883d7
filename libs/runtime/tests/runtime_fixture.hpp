// SPDX-License-Identifier: BSL-1.0
// Runs a test body as courier_main of a fresh runtime with N workers.
#pragma once

#include <courier/runtime.hpp>

#include <functional>
#include <string>
#include <vector>

namespace courier::testing {

inline int run_in_runtime(std::size_t threads, std::function<void()> body,
                          std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"test", "--courier:threads=" + std::to_string(threads),
                                     "--courier:bind=none"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    return courier::init(
        [&](int, char**) {
            body();
            return courier::finalize();
        },
        static_cast<int>(args.size()), argv.data());
}

} // namespace courier::testing
