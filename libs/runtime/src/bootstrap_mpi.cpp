// SPDX-License-Identifier: BSL-1.0
// The MPI bootstrap (bootstrap.hpp): with --courier:parcelport=mpi under an MPI launcher, MPI
// itself says who is where. Placement comes from every rank's processor name (equal names:
// one host); the token is rank 0's random number, broadcast; addresses are all-gathered.
#include "bootstrap.hpp"

#include <courier/parcelport/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace courier::detail {

namespace {

class mpi_bootstrap final : public quiet_launcher {
public:
    explicit mpi_bootstrap(bool thread_multiple) try
        : session_(parcelport::hold_mpi(thread_multiple)) {
        auto w = parcelport::mpi_world_info();
        rank_ = w.rank;
        size_ = w.size;
        where_.host = w.hosts.at(rank_);
        std::vector<std::string> distinct;
        for (std::uint32_t r = 0; r < size_; ++r) {
            auto const& h = w.hosts[r];
            if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) {
                distinct.push_back(h);
            }
            if (h == where_.host) {
                where_.local_rank += r < rank_ ? 1 : 0;
                ++local_size_;
            }
        }
        where_.host_count = static_cast<std::uint32_t>(distinct.size());
        where_.local_size = local_size_;
        // A job id names the localities' shared-memory files (the MPI transport's doorbells:
        // courier-JOB-RANK-bell), so that a peer that ends itself after declaring one failed
        // removes what it left (liveness.cpp).
        where_.job_id =
            fmt::format("{:016x}", parcelport::mpi_broadcast(rank_ == 0 ? random_token() : 0));
    } catch (std::exception const& e) {
        throw std::runtime_error(std::string("courier bootstrap (MPI): ") + e.what());
    }

    char const* name() const override { return "MPI"; }
    std::uint32_t rank() const override { return rank_; }
    std::uint32_t size() const override { return size_; }
    placement const& where() const override { return where_; }

    bootstrap_result exchange(std::vector<std::byte> const& my_address) override {
        try {
            bootstrap_result r;
            r.token = parcelport::mpi_broadcast(rank_ == 0 ? random_token() : 0);
            r.addresses = parcelport::mpi_allgather(my_address);
            return r;
        } catch (std::exception const& e) {
            throw std::runtime_error(std::string("courier bootstrap (MPI): ") + e.what());
        }
    }

private:
    std::shared_ptr<void> session_;
    std::uint32_t rank_ = 0;
    std::uint32_t size_ = 1;
    std::uint32_t local_size_ = 0;
    placement where_;
};

} // namespace

std::unique_ptr<bootstrap> make_mpi_bootstrap(bool mpi_thread_multiple) {
    return std::make_unique<mpi_bootstrap>(mpi_thread_multiple);
}

} // namespace courier::detail
