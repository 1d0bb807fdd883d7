// SPDX-License-Identifier: BSL-1.0
// A build without MPI (CMake did not find it): the MPI parcelport and bootstrap say so.
#include <courier/parcelport/mpi.hpp>
#include <courier/parcelport/transport.hpp>

namespace courier::parcelport {

namespace {
[[noreturn]] void absent() {
    throw network_error("courier: this Courier was built without MPI (install libopenmpi-dev "
                        "and rebuild): no MPI parcelport");
}
} // namespace

bool mpi_available() noexcept {
    return false;
}
void mpi_skip_finalize() noexcept {}
std::shared_ptr<void> hold_mpi(bool) {
    absent();
}
mpi_world mpi_world_info() {
    absent();
}
std::vector<std::vector<std::byte>> mpi_allgather(std::vector<std::byte> const&) {
    absent();
}
std::uint64_t mpi_broadcast(std::uint64_t) {
    absent();
}
std::unique_ptr<transport> make_mpi_transport(transport_options const&) {
    absent();
}

} // namespace courier::parcelport
