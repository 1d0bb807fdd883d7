// SPDX-License-Identifier: BSL-1.0
#include "bootstrap.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

namespace courier::detail {

namespace {

[[noreturn]] void fail(std::string const& what) {
    throw std::runtime_error("courier bootstrap: " + what);
}

void write_all(int fd, void const* p, std::size_t n) {
    auto const* c = static_cast<char const*>(p);
    while (n > 0) {
        ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            fail(std::string("write to courier-run failed: ") + std::strerror(errno));
        }
        c += w;
        n -= static_cast<std::size_t>(w);
    }
}

void read_all(int fd, void* p, std::size_t n, int timeout_ms) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
        pollfd pfd{fd, POLLIN, 0};
        int r = ::poll(&pfd, 1, timeout_ms);
        if (r == 0) {
            fail("timed out waiting for courier-run (did another locality fail to start?)");
        }
        if (r < 0 && errno == EINTR) {
            continue;
        }
        ssize_t got = ::read(fd, c, n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            fail("courier-run closed the rendezvous (another locality failed?)");
        }
        c += got;
        n -= static_cast<std::size_t>(got);
    }
}

/// A connected socket to courier-run's rendezvous at "IP:PORT"; throws naming the problem.
int connect_to(std::string const& endpoint) {
    auto colon = endpoint.rfind(':');
    if (colon == std::string::npos) {
        fail("bad COURIER_RUN_ENDPOINT '" + endpoint + "'");
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    if (::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
        fail("bad address in COURIER_RUN_ENDPOINT '" + endpoint + "'");
    }
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        if (fd >= 0) {
            ::close(fd);
        }
        fail("cannot connect to courier-run at " + endpoint + ": " + std::strerror(errno));
    }
    return fd;
}

// The rendezvous protocol: a locality checks in with {u32 rank, u32 address length} and its
// address, or declines with the length `declined`; once the job is done it sends
// {finished_word, 0} on the same connection before it exits.
constexpr std::uint32_t declined = 0xffffffffu;
constexpr std::uint32_t finished_word = 1;

class courier_run_bootstrap final : public bootstrap {
public:
    courier_run_bootstrap(std::string endpoint, std::uint32_t rank, std::uint32_t size,
                          placement where)
        : endpoint_(std::move(endpoint)), rank_(rank), size_(size), where_(std::move(where)) {}
    char const* name() const override { return "courier-run"; }
    std::uint32_t rank() const override { return rank_; }
    std::uint32_t size() const override { return size_; }
    placement const& where() const override { return where_; }

    bootstrap_result exchange(std::vector<std::byte> const& my_address) override {
        int fd = connect_to(endpoint_);
        bootstrap_result r;
        try {
            std::uint32_t hdr[2] = {rank_, static_cast<std::uint32_t>(my_address.size())};
            write_all(fd, hdr, sizeof hdr);
            write_all(fd, my_address.data(), my_address.size());
            constexpr int timeout_ms = 120'000;
            std::uint32_t n = 0;
            read_all(fd, &r.token, sizeof r.token, timeout_ms);
            read_all(fd, &n, sizeof n, timeout_ms);
            if (n != size_) {
                fail("courier-run announced " + std::to_string(n) + " localities, expected " +
                     std::to_string(size_));
            }
            for (std::uint32_t i = 0; i < n; ++i) {
                std::uint32_t len = 0;
                read_all(fd, &len, sizeof len, timeout_ms);
                if (len > 4096) {
                    fail("address of locality " + std::to_string(i) + " is too long");
                }
                std::vector<std::byte> a(len);
                read_all(fd, a.data(), len, timeout_ms);
                r.addresses.push_back(std::move(a));
            }
        } catch (...) {
            ::close(fd);
            throw;
        }
        fd_ = fd; // kept open: the launcher reports failed localities on it
        return r;
    }

    launcher_notice wait_for_notice() override {
        std::uint32_t notice[2];
        std::size_t got = 0;
        while (got < sizeof notice) {
            ssize_t n = ::read(fd_, reinterpret_cast<char*>(notice) + got, sizeof notice - got);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return {closing_.load() ? launcher_notice::closed : launcher_notice::lost, 0};
            }
            got += static_cast<std::size_t>(n);
        }
        switch (notice[0]) {
        case 1:
            return {launcher_notice::failed, notice[1]};
        case 2:
            return {launcher_notice::diagnose, 0};
        default:
            return {};
        }
    }

    void close() override {
        closing_.store(true);
        if (fd_ >= 0) {
            ::shutdown(fd_, SHUT_RDWR);
        }
    }

    void finished() override {
        if (fd_ >= 0) {
            std::uint32_t word[2] = {finished_word, 0};
            try {
                write_all(fd_, word, sizeof word);
            } catch (std::exception const&) {
                // courier-run is gone: nobody to tell
            }
        }
    }

    ~courier_run_bootstrap() override {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }

private:
    int fd_ = -1;
    std::atomic<bool> closing_{false};
    std::string endpoint_;
    std::uint32_t rank_, size_;
    placement where_;
};

std::uint32_t number_from(char const* var, std::uint32_t fallback, std::uint32_t min,
                          std::uint32_t max) {
    char const* v = std::getenv(var);
    if (v == nullptr || *v == '\0') {
        return fallback;
    }
    char* end = nullptr;
    unsigned long n = std::strtoul(v, &end, 10);
    if (*end != '\0' || n < min || n > max) {
        fail(std::string("bad ") + var + "='" + v + "'");
    }
    return static_cast<std::uint32_t>(n);
}

} // namespace

std::optional<std::uint32_t> rank_from_environment() {
    for (char const* var : {"COURIER_RANK", "PMIX_RANK"}) {
        char const* v = std::getenv(var);
        if (v == nullptr || *v == '\0') {
            continue;
        }
        char* end = nullptr;
        unsigned long n = std::strtoul(v, &end, 10);
        if (*end == '\0' && n <= 0xffffffffu) {
            return static_cast<std::uint32_t>(n);
        }
        return std::nullopt;
    }
    return std::nullopt;
}

void decline_to_join() noexcept {
    char const* ep = std::getenv("COURIER_RUN_ENDPOINT");
    auto rank = rank_from_environment();
    if (ep == nullptr || !rank || std::getenv("COURIER_RANK") == nullptr) {
        return;
    }
    try {
        int fd = connect_to(ep);
        std::uint32_t hdr[2] = {*rank, declined};
        try {
            write_all(fd, hdr, sizeof hdr);
        } catch (std::exception const&) {
            // courier-run then judges the exit by itself
        }
        ::close(fd);
    } catch (std::exception const&) {
    }
}

std::uint64_t random_token() {
    std::random_device rd;
    std::uint64_t t = (std::uint64_t{rd()} << 32) ^ rd();
    return t == 0 ? 1 : t;
}

launcher_notice quiet_launcher::wait_for_notice() {
    std::unique_lock lk(mutex_);
    cv_.wait(lk, [&] { return closed_; });
    return {};
}

void quiet_launcher::close() {
    std::lock_guard lk(mutex_);
    closed_ = true;
    cv_.notify_all();
}

std::unique_ptr<bootstrap> make_bootstrap_from_environment(std::string const& parcelport,
                                                           bool mpi_thread_multiple) {
    char const* ep = std::getenv("COURIER_RUN_ENDPOINT");
    if (ep != nullptr && parcelport == "mpi") {
        fail("--courier:parcelport=mpi runs under an MPI launcher (mpirun -np N PROGRAM, srun "
             "--mpi=pmix), not under courier-run");
    }
    if (ep == nullptr) {
        if (std::getenv("PMIX_NAMESPACE") == nullptr) {
            return nullptr;
        }
        if (parcelport == "mpi") {
            return make_mpi_bootstrap(mpi_thread_multiple);
        }
        std::string why;
        auto b = make_pmix_bootstrap(why);
        if (!b) {
            fail(why);
        }
        return b;
    }
    std::uint32_t s = number_from("COURIER_SIZE", 0, 1, 1u << 20);
    if (s == 0) {
        fail("COURIER_RUN_ENDPOINT is set but COURIER_SIZE is not");
    }
    std::uint32_t r = number_from("COURIER_RANK", s, 0, s - 1);
    if (r == s) {
        fail("COURIER_RUN_ENDPOINT is set but COURIER_RANK is not");
    }
    placement where;
    if (char const* h = std::getenv("COURIER_HOST"); h != nullptr && *h != '\0') {
        where.host = h;
    } else {
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        where.host = name;
    }
    where.host_count = number_from("COURIER_HOST_COUNT", 1, 1, s);
    where.local_size = number_from("COURIER_LOCAL_SIZE", 1, 1, s);
    where.local_rank = number_from("COURIER_LOCAL_RANK", 0, 0, where.local_size - 1);
    if (char const* job = std::getenv("COURIER_JOB_ID"); job != nullptr) {
        where.job_id = job;
    }
    std::string endpoint = ep;
    auto colon = endpoint.rfind(':');
    std::string ip = endpoint.substr(0, colon == std::string::npos ? 0 : colon);
    if (ip.rfind("127.", 0) != 0) {
        where.launcher_address = ip;
    }
    return std::make_unique<courier_run_bootstrap>(std::move(endpoint), r, s, std::move(where));
}

} // namespace courier::detail
