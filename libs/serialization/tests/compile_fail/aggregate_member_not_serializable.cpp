// SPDX-License-Identifier: BSL-1.0
// Must not compile: member 1 of an aggregate is a raw pointer. The error names the aggregate,
// the member's index and its type (tests/CMakeLists.txt checks the compiler's message).
#include <courier/serialization.hpp>

namespace app {
struct with_raw_pointer {
    int count;
    double* values;
};
} // namespace app

int main() {
    app::with_raw_pointer v{};
    auto m = courier::serialization::save(v);
    (void)m;
}
