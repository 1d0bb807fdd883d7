// SPDX-License-Identifier: BSL-1.0
// What registering memory costs on each libfabric provider here, by size, against what Courier
// pays instead: a registration-cache hit (pointer chunks sent again), a pool allocation of
// registered memory (rma_vector), and the pool lookup the parcelport does per rma chunk.
//   mr_reg_cost [--provider=tcp|shm|all] [--max-size=BYTES] [--quick]
// "tcp" is what Courier's tcp opens (parcelport::tcp_provider): libfabric's net provider where
// offered, else tcp under ofi_rxm.
// Prints one RESULT line per figure and a table with the ratio fi_mr_reg / cache hit.
#include "common/tcp_provider.hpp"
#include <courier/rma.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct domain {
    fi_info* info = nullptr;
    fid_fabric* fabric = nullptr;
    fid_domain* dom = nullptr;
    explicit domain(std::string const& provider) {
        fi_info* hints = fi_allocinfo();
        hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ;
        hints->mode = FI_CONTEXT | FI_CONTEXT2;
        hints->ep_attr->type = FI_EP_RDM;
        hints->domain_attr->mr_mode =
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints->fabric_attr->prov_name = strdup(provider.c_str());
        if (provider.rfind("tcp", 0) == 0 || provider == "net") {
            hints->domain_attr->name = strdup("lo");
        }
        int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
        fi_freeinfo(hints);
        if (rc != 0) {
            throw std::runtime_error("fi_getinfo(" + provider + "): " + fi_strerror(-rc));
        }
        if (fi_fabric(info->fabric_attr, &fabric, nullptr) != 0 ||
            fi_domain(fabric, info, &dom, nullptr) != 0) {
            throw std::runtime_error("cannot open " + provider);
        }
    }
    ~domain() {
        fi_close(&dom->fid);
        fi_close(&fabric->fid);
        fi_freeinfo(info);
    }
    std::uint64_t next_key = 1; // keys are ours unless the provider picks them (FI_MR_PROV_KEY)
    fid_mr* reg(void* p, std::size_t n) {
        fid_mr* mr = nullptr;
        std::uint64_t key = (info->domain_attr->mr_mode & FI_MR_PROV_KEY) ? 0 : next_key++;
        int rc = fi_mr_reg(dom, p, n, FI_REMOTE_READ | FI_READ, 0, key, 0, &mr, nullptr);
        if (rc != 0) {
            throw std::runtime_error(std::string("fi_mr_reg: ") + fi_strerror(-rc));
        }
        return mr;
    }
};

class domain_registrar final : public courier::rma::memory_registrar {
public:
    explicit domain_registrar(domain& d) : d_(d) {}
    courier::rma::registration register_memory(void* p, std::size_t n) override {
        fid_mr* mr = d_.reg(p, n);
        return {fi_mr_key(mr), fi_mr_desc(mr), mr};
    }
    void deregister_memory(courier::rma::registration const& r) noexcept override {
        fi_close(&static_cast<fid_mr*>(r.handle)->fid);
    }
    bool resolves_addresses_at_access() const noexcept override { return true; }
    char const* name() const noexcept override { return "bench"; }

private:
    domain& d_;
};

/// Median over `rounds` of the mean time of `reps` calls of f, in microseconds.
template <class F>
double time_us(int rounds, int reps, F&& f) {
    std::vector<double> r;
    for (int i = 0; i < rounds; ++i) {
        auto t0 = clock_type::now();
        for (int k = 0; k < reps; ++k) {
            f();
        }
        r.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() /
                    reps);
    }
    std::sort(r.begin(), r.end());
    return r[r.size() / 2];
}

void report(char const* what, std::string const& prov, std::size_t size, double us) {
    std::printf("RESULT %s %s %zu %.4f\n", what, prov.c_str(), size, us);
}

} // namespace

int main(int argc, char** argv) {
    std::string const tcp = courier::bench::tcp_provider();
    std::vector<std::string> providers{tcp, "shm"};
    std::size_t max_size = std::size_t{256} << 20;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") {
            quick = true;
            max_size = std::size_t{4} << 20;
        } else if (a.rfind("--provider=", 0) == 0) {
            std::string p = a.substr(11);
            providers = p == "all" ? providers : std::vector<std::string>{p == "tcp" ? tcp : p};
        } else if (a.rfind("--max-size=", 0) == 0) {
            max_size = std::strtoull(a.c_str() + 11, nullptr, 10);
        } else {
            std::fprintf(stderr, "usage: mr_reg_cost [--provider=tcp|shm|all] "
                                 "[--max-size=BYTES] [--quick]\n");
            return 2;
        }
    }
    int rounds = quick ? 3 : 7;
    for (auto const& prov : providers) {
        domain d(prov);
        domain_registrar registrar(d);
        courier::rma::registration_cache cache(registrar, 1024, std::size_t{4} << 30);
        std::printf("\nprovider %s (%s)\n", prov.c_str(), d.info->fabric_attr->prov_name);
        std::printf("%10s %14s %14s %14s %14s %10s\n", "size", "fi_mr_reg+close", "cache hit",
                    "pool alloc+free", "pool find", "reg/hit");
        for (std::size_t size = 4096; size <= max_size; size *= 4) {
            void* buf =
                ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf == MAP_FAILED) {
                std::perror("mmap");
                return 1;
            }
            std::memset(buf, 1, size);
            int reps = size <= (std::size_t{1} << 20) ? 200 : 20;
            if (quick) {
                reps = std::max(2, reps / 10);
            }
            double reg = time_us(rounds, reps, [&] { fi_close(&d.reg(buf, size)->fid); });
            auto warm = cache.acquire(buf, size);
            cache.release(warm);
            double hit = time_us(rounds, reps * 10, [&] {
                auto l = cache.acquire(buf, size);
                cache.release(l);
            });
            void* warm_p = courier::rma::allocate(size);
            courier::rma::deallocate(warm_p, size);
            double alloc = time_us(rounds, reps * 10, [&] {
                void* p = courier::rma::allocate(size);
                courier::rma::deallocate(p, size);
            });
            void* held = courier::rma::allocate(size);
            volatile bool sink = false;
            double find = time_us(rounds, reps * 10,
                                  [&] { sink = courier::rma::find(held, size).has_value(); });
            courier::rma::deallocate(held, size);
            ::munmap(buf, size);
            report("mr_reg", prov, size, reg);
            report("cache_hit", prov, size, hit);
            report("pool_alloc", prov, size, alloc);
            report("pool_find", prov, size, find);
            std::printf("%10zu %12.3f us %12.3f us %12.3f us %12.3f us %9.0fx\n", size, reg, hit,
                        alloc, find, hit > 0 ? reg / hit : 0.0);
        }
    }
    return 0;
}
