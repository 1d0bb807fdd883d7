// SPDX-License-Identifier: BSL-1.0
// The PMIx bootstrap: under OpenMPI's mpirun or Slurm's srun --mpi=pmix, the launcher's PMIx
// server gives each process its rank, the job's size, its host and its place on that host;
// addresses are exchanged with PMIx_Put (global scope), PMIx_Commit, a collecting PMIx_Fence and
// PMIx_Get per rank. Rank 0 also puts the job token. Built only when CMake finds PMIx
// (COURIER_HAVE_PMIX); otherwise make_pmix_bootstrap says so.
#include "bootstrap.hpp"

#ifdef COURIER_HAVE_PMIX
#include <pmix.h>

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <stdexcept>
#endif

#if defined(COURIER_HAVE_PMIX) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COURIER_LSAN 1
#endif
#endif
#if defined(COURIER_HAVE_PMIX) && (defined(__SANITIZE_ADDRESS__) || defined(COURIER_LSAN))
// libpmix keeps a few bytes of its own from PMIx_Init and PMIx_Put past PMIx_Finalize (strdup in
// pmix_rte_init, pmix_bfrops_base_value_load): LeakSanitizer would fail every program that
// mpirun or srun starts. The suppression travels with the library, whatever the environment
// (an agent or a remote shell does not pass LSAN_OPTIONS on).
extern "C" char const* __lsan_default_suppressions() {
    return "leak:libpmix.so\nleak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\n"
           "leak:mca_\n";
}
#endif

namespace courier::detail {

#ifndef COURIER_HAVE_PMIX

std::unique_ptr<bootstrap> make_pmix_bootstrap(std::string& why) {
    why = "this process was started by a PMIx launcher (PMIX_NAMESPACE is set), but this "
          "Courier was built without PMIx (install libpmix-dev and rebuild), or start it with "
          "courier-run";
    return nullptr;
}

#else

namespace {

constexpr char const* address_key = "courier.address";
constexpr char const* token_key = "courier.token";
/// Seconds the fence waits for every locality to arrive.
constexpr int fence_timeout_s = 120;

[[noreturn]] void fail(std::string const& what, pmix_status_t rc) {
    throw std::runtime_error("courier bootstrap (PMIx): " + what + ": " + PMIx_Error_string(rc));
}

struct value_deleter {
    void operator()(pmix_value_t* v) const noexcept { PMIX_VALUE_RELEASE(v); }
};
using value_ptr = std::unique_ptr<pmix_value_t, value_deleter>;

value_ptr get(pmix_proc_t const& proc, char const* key) {
    pmix_value_t* v = nullptr;
    pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &v);
    if (rc != PMIX_SUCCESS || v == nullptr) {
        fail(std::string("PMIx_Get(") + key + ") of rank " + std::to_string(proc.rank), rc);
    }
    return value_ptr(v);
}

std::uint64_t get_number(pmix_proc_t const& proc, char const* key) {
    value_ptr v = get(proc, key);
    switch (v->type) {
    case PMIX_UINT16:
        return v->data.uint16;
    case PMIX_UINT32:
        return v->data.uint32;
    case PMIX_UINT64:
        return v->data.uint64;
    case PMIX_INT:
        return static_cast<std::uint64_t>(v->data.integer);
    case PMIX_PROC_RANK:
        return v->data.rank;
    default:
        throw std::runtime_error(std::string("courier bootstrap (PMIx): ") + key +
                                 " has an unexpected type " + std::to_string(v->type));
    }
}

class pmix_bootstrap final : public quiet_launcher {
public:
    pmix_bootstrap() {
        pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
        if (rc != PMIX_SUCCESS) {
            fail("PMIX_NAMESPACE is set but no PMIx server answers (was the program started by "
                 "mpirun or srun --mpi=pmix?); PMIx_Init",
                 rc);
        }
        try {
            PMIX_LOAD_PROCID(&all_, me_.nspace, PMIX_RANK_WILDCARD);
            size_ = static_cast<std::uint32_t>(get_number(all_, PMIX_JOB_SIZE));
            where_.host_count = static_cast<std::uint32_t>(get_number(all_, PMIX_NUM_NODES));
            where_.local_size = static_cast<std::uint32_t>(get_number(all_, PMIX_LOCAL_SIZE));
            where_.local_rank = static_cast<std::uint32_t>(get_number(me_, PMIX_LOCAL_RANK));
            value_ptr host = get(me_, PMIX_HOSTNAME);
            if (host->type != PMIX_STRING || host->data.string == nullptr) {
                throw std::runtime_error("courier bootstrap (PMIx): PMIX_HOSTNAME is not a string");
            }
            where_.host = host->data.string;
            // The namespace names the job (e.g. OpenMPI's "prterun-HOST-PID@1"): a hash of it
            // names its shared-memory files.
            where_.job_id = fmt::format("{:016x}", std::hash<std::string>{}(me_.nspace));
            if (size_ < 1 || me_.rank >= size_ || where_.local_size < 1 ||
                where_.local_rank >= where_.local_size || where_.host_count < 1) {
                throw std::runtime_error("courier bootstrap (PMIx): inconsistent job data");
            }
        } catch (...) {
            PMIx_Finalize(nullptr, 0);
            throw;
        }
    }
    ~pmix_bootstrap() override { PMIx_Finalize(nullptr, 0); }

    char const* name() const override { return "PMIx"; }
    std::uint32_t rank() const override { return me_.rank; }
    std::uint32_t size() const override { return size_; }
    placement const& where() const override { return where_; }

    bootstrap_result exchange(std::vector<std::byte> const& my_address) override {
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = const_cast<char*>(reinterpret_cast<char const*>(my_address.data()));
        v.data.bo.size = my_address.size();
        pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, address_key, &v);
        if (rc != PMIX_SUCCESS) {
            fail("PMIx_Put of this locality's address", rc);
        }
        if (me_.rank == 0) {
            pmix_value_t t;
            PMIX_VALUE_CONSTRUCT(&t);
            t.type = PMIX_UINT64;
            t.data.uint64 = random_token();
            if ((rc = PMIx_Put(PMIX_GLOBAL, token_key, &t)) != PMIX_SUCCESS) {
                fail("PMIx_Put of the job token", rc);
            }
        }
        if ((rc = PMIx_Commit()) != PMIX_SUCCESS) {
            fail("PMIx_Commit", rc);
        }
        pmix_info_t info[2];
        bool collect = true;
        int timeout = fence_timeout_s;
        PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
        rc = PMIx_Fence(&all_, 1, info, 2);
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        if (rc != PMIX_SUCCESS) {
            fail("the fence of the address exchange (did a locality fail to start?)", rc);
        }
        bootstrap_result r;
        pmix_proc_t p;
        PMIX_LOAD_PROCID(&p, me_.nspace, 0);
        r.token = get_number(p, token_key);
        for (std::uint32_t i = 0; i < size_; ++i) {
            PMIX_LOAD_PROCID(&p, me_.nspace, i);
            value_ptr a = get(p, address_key);
            if (a->type != PMIX_BYTE_OBJECT || a->data.bo.size > 4096) {
                throw std::runtime_error("courier bootstrap (PMIx): the address of locality " +
                                         std::to_string(i) + " is malformed");
            }
            auto const* b = reinterpret_cast<std::byte const*>(a->data.bo.bytes);
            r.addresses.emplace_back(b, b + a->data.bo.size);
        }
        return r;
    }

private:
    pmix_proc_t me_{};
    pmix_proc_t all_{};
    std::uint32_t size_ = 1;
    placement where_;
};

} // namespace

std::unique_ptr<bootstrap> make_pmix_bootstrap(std::string&) {
    return std::make_unique<pmix_bootstrap>();
}

#endif

} // namespace courier::detail
