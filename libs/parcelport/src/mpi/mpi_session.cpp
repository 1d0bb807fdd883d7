// SPDX-License-Identifier: BSL-1.0
// The process's MPI session and the bootstrap's collective calls (courier/parcelport/mpi.hpp).
#include "mpi_error.hpp"

#include <courier/parcelport/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <stdexcept>

namespace courier::parcelport {

namespace {

void check(int rc, char const* what) {
    if (rc != MPI_SUCCESS) {
        mpi_pp::fail(what, rc);
    }
}

std::mutex g_mutex;
std::weak_ptr<void> g_session;
std::atomic<bool> g_skip_finalize{false};

/// Finalizes MPI when the last holder lets go, if Courier initialized it.
struct session {
    bool owned = false;
    ~session() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (owned && finalized == 0 && !g_skip_finalize.load()) {
            MPI_Finalize();
        }
    }
};

} // namespace

bool mpi_available() noexcept {
    return true;
}

void mpi_skip_finalize() noexcept {
    g_skip_finalize.store(true);
}

std::shared_ptr<void> hold_mpi(bool thread_multiple) {
    std::lock_guard g(g_mutex);
    if (auto s = g_session.lock()) {
        return s;
    }
    int const wanted = thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized != 0) {
        throw network_error("MPI: already finalized in this process; it cannot be used again");
    }
    auto s = std::make_shared<session>();
    int provided = 0;
    if (initialized == 0) {
        check(MPI_Init_thread(nullptr, nullptr, wanted, &provided), "MPI_Init_thread");
        s->owned = true;
    } else {
        check(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    if (provided < wanted) {
        throw network_error(std::string("MPI: the MPI library provides thread level ") +
                            std::to_string(provided) + ", below the " +
                            (thread_multiple ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_SERIALIZED") +
                            " the MPI parcelport needs");
    }
    // Errors are returned, not fatal: the parcelport turns them into network_error.
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    g_session = s;
    return s;
}

mpi_world mpi_world_info() {
    mpi_world w;
    int rank = 0, size = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    w.rank = static_cast<std::uint32_t>(rank);
    w.size = static_cast<std::uint32_t>(size);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    check(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
    std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
    check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                        MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgather of the host names");
    for (int r = 0; r < size; ++r) {
        char const* p = all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
        w.hosts.emplace_back(p, std::find(p, p + MPI_MAX_PROCESSOR_NAME, '\0'));
    }
    return w;
}

std::vector<std::vector<std::byte>> mpi_allgather(std::vector<std::byte> const& mine) {
    int size = 0;
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    if (mine.size() > 1u << 20) {
        throw std::length_error("courier: an address of more than 1 MiB");
    }
    int n = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(sizes.size());
    check(MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather of the address sizes");
    long long total = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] < 0 || sizes[i] > (1 << 20)) {
            throw network_error("MPI: rank " + std::to_string(i) + " published an address of " +
                                std::to_string(sizes[i]) + " bytes");
        }
        offsets[i] = static_cast<int>(total);
        total += sizes[i];
    }
    if (total > INT_MAX) {
        throw network_error("MPI: the addresses add up to more than 2 GiB");
    }
    std::vector<std::byte> all(static_cast<std::size_t>(total));
    check(MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                         MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgatherv of the addresses");
    std::vector<std::vector<std::byte>> out;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto b = all.begin() + offsets[i];
        out.emplace_back(b, b + sizes[i]);
    }
    return out;
}

std::uint64_t mpi_broadcast(std::uint64_t value) {
    check(MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
    return value;
}

} // namespace courier::parcelport
