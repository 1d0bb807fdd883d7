// SPDX-License-Identifier: BSL-1.0
// MPI error codes as text and as network_error, for the MPI session and transport.
#pragma once

#include <courier/parcelport/error.hpp>

#include <mpi.h>

#include <string>

namespace courier::parcelport::mpi_pp {

inline std::string mpi_error_string(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) {
        return "MPI error " + std::to_string(rc);
    }
    return std::string(text, static_cast<std::size_t>(len));
}

[[noreturn]] inline void fail(char const* what, int rc) {
    throw network_error(std::string("MPI: ") + what + ": " + mpi_error_string(rc));
}

} // namespace courier::parcelport::mpi_pp
