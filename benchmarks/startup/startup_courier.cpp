// SPDX-License-Identifier: BSL-1.0
// Joins the job and ends: what every Courier program pays before and after its own work
// (init connects the localities; locality 0's finalize ends them all). benchmarks/startup/run.sh
// times it from launch to exit.
#include <courier/courier.hpp>

int main(int argc, char** argv) {
    return courier::init(
        [](int, char**) {
            courier::finalize();
            return 0;
        },
        argc, argv);
}
