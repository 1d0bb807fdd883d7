// SPDX-License-Identifier: BSL-1.0
// The libfabric transport: one FI_EP_RDM endpoint, one completion queue, pre-posted receives.
// Protocol (libs/parcelport/README.md): an eager message carries the header, the chunk
// descriptors and, when it fits, the index data; the receiver pulls pointer/rma chunks (and a
// non-inline index) with fi_read into its own buffers, delivers the message, and tells the
// sender with a DONE message that it may release its registrations and run on_sent.
#include "doorbell.hpp"
#include "wire.hpp"

#include <courier/parcelport/detail/slot_table.hpp>
#include <courier/parcelport/transport.hpp>
#include <courier/rma/pool.hpp>
#include <courier/rma/registration_cache.hpp>
#include <courier/serialization/error.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace courier::parcelport {

namespace {

std::string fi_message(char const* what, long rc) {
    return std::string("libfabric: ") + what + ": " + fi_strerror(static_cast<int>(-rc)) + " (" +
           std::to_string(rc) + ")";
}

void check(char const* what, long rc) {
    if (rc != 0) {
        throw std::runtime_error(fi_message(what, rc));
    }
}

/// Receive buffers for RMA-read chunks, reused by power-of-two size class (4 KiB ... 1 GiB).
/// A fresh allocation of a large buffer costs a page fault per 4 KiB on first touch (and glibc
/// returns large blocks to the kernel on free), which at 4 MiB costs more than the copy itself;
/// a reused buffer is already mapped. The buffers go to the user inside the message (a
/// serialize_buffer adopts them); their deleter returns them here, also after the transport is
/// gone. At most `limit` bytes are kept.
class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
    static constexpr unsigned min_shift = 12, max_shift = 30;
    explicit buffer_pool(std::size_t limit) : limit_(limit) {}
    ~buffer_pool() {
        for (auto& list : free_) {
            for (std::byte* p : list) {
                delete[] p;
            }
        }
    }
    buffer_pool(buffer_pool const&) = delete;
    buffer_pool& operator=(buffer_pool const&) = delete;

    /// A buffer of at least `n` bytes; `reused` says whether it came from the pool.
    std::shared_ptr<std::byte[]> get(std::size_t n, bool& reused) {
        reused = false;
        unsigned shift = min_shift;
        while (shift <= max_shift && (std::size_t{1} << shift) < n) {
            ++shift;
        }
        if (n < (std::size_t{1} << min_shift) || shift > max_shift) {
            return std::shared_ptr<std::byte[]>(new std::byte[n == 0 ? 1 : n]);
        }
        std::byte* p = nullptr;
        {
            std::lock_guard g(mutex_);
            auto& list = free_[shift - min_shift];
            if (!list.empty()) {
                p = list.back();
                list.pop_back();
                cached_ -= std::size_t{1} << shift;
                reused = true;
            }
        }
        if (p == nullptr) {
            p = new std::byte[std::size_t{1} << shift];
        }
        return std::shared_ptr<std::byte[]>(
            p, [self = shared_from_this(), shift](std::byte* q) { self->put(q, shift); });
    }

private:
    void put(std::byte* p, unsigned shift) noexcept {
        {
            std::lock_guard g(mutex_);
            if (cached_ + (std::size_t{1} << shift) <= limit_) {
                free_[shift - min_shift].push_back(p);
                cached_ += std::size_t{1} << shift;
                return;
            }
        }
        delete[] p;
    }

    std::mutex mutex_;
    std::size_t limit_;
    std::size_t cached_ = 0;
    std::array<std::vector<std::byte*>, max_shift - min_shift + 1> free_;
};

/// Every posted operation starts with fi_context2 (providers that need FI_CONTEXT use it).
struct op {
    enum class kind : std::uint8_t { recv, send, read };
    fi_context2 ctx;
    kind k;
    explicit op(kind kk) : ctx{}, k(kk) {}
};

struct recv_op : op {
    std::unique_ptr<std::byte[]> buf;
    fid_mr* mr = nullptr;
    recv_op() : op(kind::recv) {}
};

struct send_state;
struct send_op : op {
    send_state* s;
    explicit send_op(send_state* st) : op(kind::send), s(st) {}
};

struct send_state {
    std::uint64_t id = 0; // its slot's id in the send table
    std::uint32_t dest = 0;
    serialization::message msg;
    std::vector<fid_mr*> mrs;
    std::vector<rma::registration_cache::lease> leases; // released when the send completes
    transport::sent_handler on_sent;
    std::vector<std::byte> eager;
    std::vector<std::byte> table; // the descriptor list, when it does not fit the eager message
    send_op op{this};
    bool needs_done = false;
    // Set by the poller only (completions and DONEs are handled under poll_mutex_).
    bool eager_done = false;
    bool remote_done = false;
};

/// Sends in flight (see slot_table: a DONE for a completed or forged id finds nothing). Slots
/// keep their send_state, and with it the capacity of its vectors (the eager message above
/// all), so a send allocates nothing here once the table is warm; beyond the first
/// `kept_slots` slots, or past `kept_eager` bytes, a recycled state gives its buffers back
/// (bounded memory after a burst).
using send_table = detail::slot_table<send_state>;
constexpr std::size_t kept_slots = 4096;
constexpr std::size_t kept_eager = 64 * 1024;

struct incoming;
struct read_op : op {
    incoming* in;
    explicit read_op(incoming* i) : op(kind::read), in(i) {}
};

struct incoming {
    std::uint32_t source = 0;
    std::uint64_t send_id = 0;
    serialization::message msg; // its index buffer is filled in place (copied or read)
    std::vector<serialization::serialization_chunk> chunks;
    std::vector<std::shared_ptr<std::byte[]>> owners; // parallel to chunks (null for index)
    std::vector<fid_mr*> mrs;
    std::deque<read_op> reads;
    // The reads of the current phase, posted in order by post_reads() (one backlog entry for
    // all that -FI_EAGAIN holds back, not one per read).
    struct read_piece {
        std::byte* local;
        std::size_t size;
        std::uint64_t remote;
        std::uint64_t key;
        void* desc;
    };
    std::vector<read_piece> pieces; // reads[i] is the context of pieces[i]
    std::size_t next_piece = 0;
    std::size_t outstanding = 0;
    std::size_t rma_bytes = 0; // counted against the read budget until finished
    bool failed = false;
    // Phase one of a parcel whose descriptors are remote: reading the table.
    bool table_phase = false;
    wire::header h{};
    std::vector<std::byte> table;        // read from the sender
    std::vector<std::byte> inline_index; // kept from the eager message for phase two
};

/// A rendezvous parcel waiting for the read budget: its eager message, copied.
struct deferred_parcel {
    wire::header h;
    std::vector<std::byte> eager;
    std::size_t rma_bytes;
};

/// The transport's statistics, counted without a lock (read only as a snapshot).
struct counters {
    using c = std::atomic<std::uint64_t>;
    c messages_sent{0}, messages_received{0}, eager_bytes_sent{0}, rma_bytes_read{0},
        rendezvous_sends{0}, registrations{0}, eagain_retries{0}, bytes_copied_on_send{0},
        receive_buffers_reused{0}, deferred_rendezvous{0}, pool_chunks_sent{0},
        registration_cache_hits{0}, registration_cache_misses{0}, pool_receive_buffers{0};
    statistics snapshot() const {
        statistics s;
        s.messages_sent = messages_sent;
        s.messages_received = messages_received;
        s.eager_bytes_sent = eager_bytes_sent;
        s.rma_bytes_read = rma_bytes_read;
        s.rendezvous_sends = rendezvous_sends;
        s.registrations = registrations;
        s.eagain_retries = eagain_retries;
        s.bytes_copied_on_send = bytes_copied_on_send;
        s.receive_buffers_reused = receive_buffers_reused;
        s.deferred_rendezvous = deferred_rendezvous;
        s.pool_chunks_sent = pool_chunks_sent;
        s.registration_cache_hits = registration_cache_hits;
        s.registration_cache_misses = registration_cache_misses;
        s.pool_receive_buffers = pool_receive_buffers;
        return s;
    }
};

class libfabric_transport;

/// The rma pool's and the registration cache's view of this transport's domain.
class fabric_registrar final : public rma::memory_registrar {
public:
    explicit fabric_registrar(libfabric_transport& t) : t_(t) {}
    rma::registration register_memory(void* base, std::size_t bytes) override;
    void deregister_memory(rma::registration const& r) noexcept override {
        fi_close(&static_cast<fid_mr*>(r.handle)->fid);
    }
    bool resolves_addresses_at_access() const noexcept override { return va_based_; }
    char const* name() const noexcept override { return "libfabric"; }
    void set_va_based(bool v) noexcept { va_based_ = v; }

private:
    libfabric_transport& t_;
    bool va_based_ = false;
};

class libfabric_transport final : public transport {
    friend class fabric_registrar;

public:
    explicit libfabric_transport(transport_options const& o) : opts_(o) {
        open();
        if (opts_.read_budget == 0) {
            opts_.read_budget = default_read_budget(info_->fabric_attr->prov_name);
        }
    }
    ~libfabric_transport() override { close(); }

    /// The provider's address, then the doorbell's name (empty without one), then the name's
    /// length in two bytes.
    std::vector<std::byte> address() const override {
        std::vector<std::byte> a(256);
        std::size_t len = a.size();
        check("fi_getname", fi_getname(&ep_->fid, a.data(), &len));
        a.resize(len);
        std::string bell = bell_ ? bell_->name() : std::string();
        for (char c : bell) {
            a.push_back(static_cast<std::byte>(c));
        }
        a.push_back(static_cast<std::byte>(bell.size() & 0xff));
        a.push_back(static_cast<std::byte>(bell.size() >> 8));
        return a;
    }

    void set_peers(std::vector<std::vector<std::byte>> const& addrs, std::uint32_t rank) override {
        rank_ = rank;
        peers_.assign(addrs.size(), FI_ADDR_NOTAVAIL);
        std::vector<std::string> bells(addrs.size());
        for (std::size_t i = 0; i < addrs.size(); ++i) {
            auto const& a = addrs[i];
            std::size_t bell_len = a.size() < 2
                                       ? SIZE_MAX
                                       : std::to_integer<std::size_t>(a[a.size() - 2]) |
                                             std::to_integer<std::size_t>(a[a.size() - 1]) << 8;
            if (bell_len > a.size() - 2) {
                throw std::runtime_error("courier: malformed address of locality " +
                                         std::to_string(i));
            }
            std::size_t fi_len = a.size() - 2 - bell_len;
            for (std::size_t k = fi_len; k < fi_len + bell_len; ++k) {
                bells[i].push_back(static_cast<char>(a[k]));
            }
            int n = fi_av_insert(av_, a.data(), 1, &peers_[i], 0, nullptr);
            if (n != 1) {
                throw std::runtime_error("libfabric: fi_av_insert failed for locality " +
                                         std::to_string(i));
            }
        }
        if (bell_ && bell_->connect(bells) != 0) {
            std::fprintf(stderr, "courier: could not open every peer's doorbell; idle "
                                 "localities will answer some peers late\n");
        }
    }

    void set_receive_handler(receive_handler h) override { on_receive_ = std::move(h); }
    void set_job_token(std::uint64_t token) override { opts_.job_token = token; }

    void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) override;
    bool progress() override;
    int wait_fd() const override { return bell_ ? bell_->fd() : wait_fd_; }
    bool wait_fd_may_miss() const override { return bell_ != nullptr; }
    bool can_sleep() override {
        if (bell_) {
            // Raise the word, then look: a peer's post after this rings; one before it is
            // found here.
            bell_->arm();
            if (progress()) {
                bell_->disarm();
                return false;
            }
            return true;
        }
        if (wait_fd_ < 0) {
            return true; // no fd to wait on: the scheduler sleeps briefly and polls again
        }
        std::unique_lock lk(poll_mutex_, std::try_to_lock);
        if (!lk) {
            return false; // someone is polling right now: stay awake
        }
        fid* f = &cq_->fid;
        return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
    }
    statistics stats() const override { return counters_.snapshot(); }
    std::string provider_name() const override { return info_->fabric_attr->prov_name; }
    std::string debug_state() const override {
        std::size_t sends = 0;
        sends_.for_each_published([&](send_table::slot&, std::uint64_t) { ++sends; });
        std::lock_guard g(mutex_);
        std::size_t reads = 0;
        for (auto const& [p, in] : incoming_) {
            reads += in->outstanding;
        }
        return "sends in flight " + std::to_string(sends) + ", incoming rendezvous " +
               std::to_string(incoming_.size()) + " (reads outstanding " + std::to_string(reads) +
               "), backlog " + std::to_string(backlog_.size()) + ", messages sent " +
               std::to_string(counters_.messages_sent) + ", received " +
               std::to_string(counters_.messages_received) + ", EAGAIN retries " +
               std::to_string(counters_.eagain_retries);
    }

private:
    void open();
    void close() noexcept;
    void post_recv(recv_op* r);
    void handle_recv(recv_op* r, std::size_t len);
    void handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                       std::size_t rma_bytes);
    /// Runs handle_parcel now, or defers a rendezvous parcel while the reads in flight use
    /// up the budget (opts_.read_budget): that bounds the receiver's memory under a flood of
    /// large messages and keeps the pooled destination buffers few and cache-warm.
    void admit_parcel(wire::header const& h, std::byte const* p, std::size_t len);
    /// Gives back read budget; parcels waiting for it are admitted by the next progress()
    /// (admit_deferred), not here: by then the worker has run the tasks of the parcels just
    /// delivered, their landing buffers went back to the pool, and the next read lands in one
    /// that is still in cache.
    void release_read_budget(std::size_t bytes);
    /// Admits the waiting parcels that the budget now allows; true if any.
    bool admit_deferred();
    /// Posts the reads of `in` not posted yet, in order; stops at the first that fails
    /// (returning its code, -FI_EAGAIN when the provider's queue is full).
    long post_reads(incoming* in);
    void start_reads(std::unique_ptr<incoming> in, std::vector<wire::descriptor> const& ds,
                     bool index_inline);
    /// Sets up a rendezvous from its descriptors: destination buffers, then the reads.
    void begin_reads(wire::header const& h, std::vector<wire::descriptor> const& ds,
                     bool index_inline, std::byte const* inline_index, std::size_t rma_bytes);
    /// Phase two of a parcel whose descriptor table was read (wire::descriptors_remote).
    void continue_after_table(std::unique_ptr<incoming> in);
    void finish_incoming(incoming* in);
    void send_done(std::uint32_t dest, std::uint64_t id);
    void complete_send(send_state* s, std::error_code ec);
    /// Clears a send whose slot the caller holds (claimed, or never published) and gives the
    /// slot back.
    void recycle_send(send_table::slot* slot) noexcept;
    /// fi_mr_reg. `counted`: in statistics::registrations (the pool counts its own).
    fid_mr* register_memory(void const* p, std::size_t n, std::uint64_t access,
                            bool counted = true);
    /// The remote address and key of [p, p + n) for a peer's fi_read: the rma pool's
    /// registration when the memory is pool memory registered here (nothing to do), else one
    /// from the registration cache (held by `s` until the send completes).
    std::pair<std::uint64_t, std::uint64_t> remote_access(void const* p, std::size_t n,
                                                          send_state& s);
    /// A destination for an RMA-read chunk: rma chunks go to pool memory (which a received
    /// rma_vector adopts), the rest to the receive buffer pool.
    std::shared_ptr<std::byte[]> receive_buffer(std::size_t n, bool rma_chunk);
    void* desc_of(fid_mr* mr) const { return mr != nullptr ? fi_mr_desc(mr) : nullptr; }
    /// Retries `post` until it stops saying -FI_EAGAIN (progressing meanwhile), or queues it.
    /// (The callable is wrapped in a std::function, which allocates, only when deferred.)
    template <class Post>
    void post_or_defer(Post&& post, char const* what) {
        long rc = post();
        if (rc != 0) {
            defer(rc, std::function<long()>(std::forward<Post>(post)), what);
        }
    }
    void defer(long rc, std::function<long()> post, char const* what);

    transport_options opts_;
    fi_info* info_ = nullptr;
    fid_fabric* fabric_ = nullptr;
    fid_domain* domain_ = nullptr;
    fid_av* av_ = nullptr;
    fid_cq* cq_ = nullptr;
    fid_ep* ep_ = nullptr;
    int wait_fd_ = -1;
    bool mr_local_ = false, mr_virt_ = false, mr_prov_key_ = false;
    std::size_t recv_size_ = 0;
    std::size_t max_read_ = 0;
    std::vector<fi_addr_t> peers_;
    std::uint32_t rank_ = 0;
    receive_handler on_receive_;
    std::vector<std::unique_ptr<recv_op>> recvs_;
    std::atomic<std::uint64_t> next_key_{1};

    mutable std::mutex mutex_; // incoming_, backlog_, deferred_, reading_bytes_
    std::mutex poll_mutex_;    // the completion queue is polled by one thread at a time
    mutable send_table sends_; // lock-free
    std::unordered_map<incoming*, std::unique_ptr<incoming>> incoming_;
    std::deque<std::pair<std::function<long()>, char const*>> backlog_;
    std::atomic<std::size_t> backlog_size_{0}; // backlog_.size(), read without the lock
    std::size_t reading_bytes_ = 0;            // rendezvous bytes being read (mutex_)
    std::deque<deferred_parcel> deferred_;     // waiting for the read budget (mutex_)
    std::atomic<bool> admit_pending_{false};   // budget was released with parcels waiting
    counters counters_;                        // lock-free: the send and receive paths only add
    std::shared_ptr<buffer_pool> pool_ = std::make_shared<buffer_pool>(std::size_t{256} << 20);
    fabric_registrar registrar_{*this};
    std::unique_ptr<rma::registration_cache> cache_;
    bool pool_attached_ = false;
    std::unique_ptr<detail::doorbell> bell_; // shm only: wakes this process when a peer posts
};

rma::registration fabric_registrar::register_memory(void* base, std::size_t bytes) {
    std::uint64_t access = FI_REMOTE_READ | FI_READ;
    if (t_.mr_local_) {
        access |= FI_SEND | FI_RECV;
    }
    fid_mr* mr = t_.register_memory(base, bytes, access, /*counted=*/false);
    return {fi_mr_key(mr), fi_mr_desc(mr), mr};
}

void libfabric_transport::open() {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(opts_.provider.c_str());
    if (opts_.provider.rfind("tcp", 0) == 0 || opts_.provider.rfind("sockets", 0) == 0) {
        hints->domain_attr->name = strdup("lo"); // loopback only: this is one machine
    }
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc != 0 || info_ == nullptr) {
        throw std::runtime_error(fi_message(("no provider '" + opts_.provider +
                                             "' with "
                                             "FI_EP_RDM, FI_MSG and FI_RMA")
                                                .c_str(),
                                            rc));
    }
    auto mode = info_->domain_attr->mr_mode;
    mr_local_ = (mode & FI_MR_LOCAL) != 0;
    mr_virt_ = (mode & FI_MR_VIRT_ADDR) != 0;
    mr_prov_key_ = (mode & FI_MR_PROV_KEY) != 0;
    recv_size_ = sizeof(wire::header) + opts_.eager_threshold + 32 * sizeof(wire::descriptor);
    max_read_ = std::min<std::size_t>(info_->ep_attr->max_msg_size, std::size_t{1} << 30);

    check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    check("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check("fi_av_open", fi_av_open(domain_, &av_attr, &av_, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_MSG;
    // A wait fd lets idle workers sleep until a completion arrives. libfabric 1.17's shm never
    // signals it when a peer writes into our region (fi_trywait always says "busy", so idle
    // workers spun at 100 % CPU) while every completion still costs a write and a read on it
    // (measured: 8 B round trips 2.4 -> 1.9 us without it). shm therefore gets no wait object
    // and the scheduler's bounded-backoff sleep instead.
    cq_attr.wait_obj =
        std::string_view(info_->fabric_attr->prov_name) == "shm" ? FI_WAIT_NONE : FI_WAIT_FD;
    cq_attr.size = 4096;
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) != 0) {
        cq_attr.wait_obj = FI_WAIT_NONE;
        check("fi_cq_open", fi_cq_open(domain_, &cq_attr, &cq_, nullptr));
    } else if (fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) {
        wait_fd_ = -1;
    }
    check("fi_endpoint", fi_endpoint(domain_, info_, &ep_, nullptr));
    check("fi_ep_bind(av)", fi_ep_bind(ep_, &av_->fid, 0));
    check("fi_ep_bind(cq)", fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
    if (std::string_view(info_->fabric_attr->prov_name) == "shm") {
        // shm names its region after the pid unless told otherwise, and a killed process
        // leaves the region behind: a later process with the same pid then fails fi_enable
        // with EBUSY. A name unique to the job and rank avoids that, and lets courier-run
        // remove the leftovers of a killed locality.
        std::string name = opts_.endpoint_name;
        if (name.empty()) {
            static std::atomic<unsigned> counter{0};
            name = "courier-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                   std::to_string(std::random_device{}());
        }
        check("fi_setname", fi_setname(&ep_->fid, name.data(), name.size() + 1));
        try {
            if (opts_.doorbell) {
                bell_ = std::make_unique<detail::doorbell>(name);
            }
        } catch (std::exception const& e) {
            std::fprintf(stderr, "courier: %s; idle workers will poll instead\n", e.what());
        }
    }
    check("fi_enable", fi_enable(ep_));
    // Providers that read through virtual addresses when the access happens (no pinned pages):
    // a cached registration of memory freed and mapped again still reads the new contents.
    std::string_view core = info_->fabric_attr->prov_name;
    core = core.substr(0, core.find(';'));
    registrar_.set_va_based(core == "tcp" || core == "shm" || core == "sockets" || core == "udp");
    cache_ = std::make_unique<rma::registration_cache>(registrar_, opts_.registration_cache_entries,
                                                       opts_.registration_cache_bytes);
    if (opts_.attach_rma_pool) {
        pool_attached_ = rma::attach(registrar_);
    }
    for (std::size_t i = 0; i < opts_.posted_receives; ++i) {
        auto r = std::make_unique<recv_op>();
        r->buf.reset(new std::byte[recv_size_]);
        if (mr_local_) {
            r->mr = register_memory(r->buf.get(), recv_size_, FI_RECV);
        }
        post_recv(r.get());
        recvs_.push_back(std::move(r));
    }
}

void libfabric_transport::close() noexcept {
    if (ep_ != nullptr) {
        fi_close(&ep_->fid);
    }
    sends_.for_each_published([this](send_table::slot& slot, std::uint64_t) {
        for (auto& l : slot.value.leases) {
            cache_->release(l);
        }
    });
    cache_.reset();
    if (pool_attached_) {
        rma::detach(registrar_);
    }
    for (auto& r : recvs_) {
        if (r->mr != nullptr) {
            fi_close(&r->mr->fid);
        }
    }
    sends_.for_each_published([](send_table::slot& slot, std::uint64_t) {
        for (auto* mr : slot.value.mrs) {
            fi_close(&mr->fid);
        }
    });
    for (auto& [p, in] : incoming_) {
        for (auto* mr : in->mrs) {
            fi_close(&mr->fid);
        }
    }
    if (cq_ != nullptr) {
        fi_close(&cq_->fid);
    }
    if (av_ != nullptr) {
        fi_close(&av_->fid);
    }
    if (domain_ != nullptr) {
        fi_close(&domain_->fid);
    }
    if (fabric_ != nullptr) {
        fi_close(&fabric_->fid);
    }
    if (info_ != nullptr) {
        fi_freeinfo(info_);
    }
}

fid_mr* libfabric_transport::register_memory(void const* p, std::size_t n, std::uint64_t access,
                                             bool counted) {
    fid_mr* mr = nullptr;
    std::uint64_t key = mr_prov_key_ ? 0 : next_key_.fetch_add(1);
    long rc = fi_mr_reg(domain_, p, n, access, 0, key, 0, &mr, nullptr);
    if (rc != 0) {
        throw std::runtime_error(fi_message("fi_mr_reg", rc));
    }
    counters_.registrations += counted;
    return mr;
}

void libfabric_transport::defer(long rc, std::function<long()> post, char const* what) {
    if (rc != -FI_EAGAIN) {
        throw std::runtime_error(fi_message(what, rc));
    }
    ++counters_.eagain_retries;
    std::lock_guard g(mutex_);
    backlog_.emplace_back(std::move(post), what);
    backlog_size_.store(backlog_.size(), std::memory_order_release);
}

void libfabric_transport::post_recv(recv_op* r) {
    post_or_defer(
        [this, r] {
            return static_cast<long>(
                fi_recv(ep_, r->buf.get(), recv_size_, desc_of(r->mr), FI_ADDR_UNSPEC, &r->ctx));
        },
        "fi_recv");
}

void libfabric_transport::send(std::uint32_t dest, serialization::message&& m,
                               sent_handler on_sent) {
    if (dest >= peers_.size()) {
        throw std::out_of_range("courier: send to unknown locality " + std::to_string(dest));
    }
    send_table::slot* slot = sends_.acquire();
    // Until the message is posted, a failure gives the slot back.
    struct slot_guard {
        libfabric_transport* t;
        send_table::slot* slot;
        ~slot_guard() {
            if (slot != nullptr) {
                t->recycle_send(slot);
            }
        }
    } guard{this, slot};
    send_state* s = &slot->value;
    s->id = slot->id();
    s->dest = dest;
    s->msg = std::move(m);
    s->on_sent = std::move(on_sent);
    auto data = s->msg.data();
    auto chunks = s->msg.chunks();
    // Layout of the eager message: header, one descriptor per chunk (+ one for the index data
    // when it does not fit and is read remotely), then the index data when it fits.
    if (chunks.size() > wire::max_chunks) {
        throw std::length_error("courier: a message of " + std::to_string(chunks.size()) +
                                " chunks is more than the protocol carries (" +
                                std::to_string(wire::max_chunks) + ")");
    }
    std::size_t fixed = sizeof(wire::header) + chunks.size() * sizeof(wire::descriptor);
    bool remote_table = fixed + sizeof(wire::descriptor) > recv_size_;
    if (remote_table) {
        // Too many chunks to describe inline: the list goes in a table the receiver reads.
        fixed = sizeof(wire::header) + sizeof(wire::descriptor);
    }
    bool inline_index = fixed + data.size() <= recv_size_;
    if (!inline_index && !remote_table) {
        fixed += sizeof(wire::descriptor);
    }
    s->eager.resize(fixed + (inline_index ? data.size() : 0));
    if (remote_table) {
        s->table.resize((chunks.size() + (inline_index ? 0 : 1)) * sizeof(wire::descriptor));
    }
    std::byte* desc_out = remote_table ? s->table.data() : s->eager.data() + sizeof(wire::header);
    auto put = [&](wire::descriptor const& d) {
        std::memcpy(desc_out, &d, sizeof d);
        desc_out += sizeof d;
    };
    try {
        for (auto const& c : chunks) {
            wire::descriptor d{};
            d.type = static_cast<std::uint8_t>(c.type);
            d.size = c.size;
            if (c.type != serialization::chunk_type::index && c.size != 0) {
                // The receiver reads the chunk in place: nothing is copied. Pool memory is
                // registered already; other memory through the registration cache.
                std::tie(d.address, d.key) = remote_access(c.address, c.size, *s);
                s->needs_done = true;
            }
            put(d);
        }
        if (!inline_index) {
            wire::descriptor d{};
            d.type = wire::index_buffer_type;
            d.size = data.size();
            std::tie(d.address, d.key) = remote_access(data.data(), data.size(), *s);
            put(d);
            s->needs_done = true;
        }
        if (remote_table) {
            wire::descriptor d{};
            d.type = wire::descriptor_table_type;
            d.size = s->table.size();
            std::tie(d.address, d.key) = remote_access(s->table.data(), s->table.size(), *s);
            std::memcpy(s->eager.data() + sizeof(wire::header), &d, sizeof d);
            s->needs_done = true;
        }
    } catch (...) {
        for (auto& l : s->leases) {
            cache_->release(l);
        }
        throw;
    }
    wire::header h{};
    h.magic = wire::magic;
    h.version = wire::version;
    h.kind = wire::parcel;
    h.flags = static_cast<std::uint8_t>((inline_index ? wire::index_inline : 0) |
                                        (remote_table ? wire::descriptors_remote : 0));
    h.token = opts_.job_token;
    h.source = rank_;
    h.chunk_count = static_cast<std::uint32_t>(chunks.size());
    h.send_id = s->id;
    h.index_size = data.size();
    std::memcpy(s->eager.data(), &h, sizeof h);
    if (inline_index && !data.empty()) {
        std::memcpy(s->eager.data() + fixed, data.data(), data.size());
    }
    fid_mr* eager_mr =
        mr_local_ ? register_memory(s->eager.data(), s->eager.size(), FI_SEND) : nullptr;
    if (eager_mr != nullptr) {
        s->mrs.push_back(eager_mr);
    }
    sends_.publish(std::exchange(guard.slot, nullptr));
    send_state* raw = s;
    ++counters_.messages_sent;
    counters_.eager_bytes_sent += raw->eager.size();
    counters_.rendezvous_sends += raw->needs_done;
    counters_.bytes_copied_on_send += inline_index ? data.size() : 0;
    fi_addr_t to = peers_[dest];
    try {
        post_or_defer(
            [this, raw, eager_mr, to, dest] {
                long rc = static_cast<long>(fi_send(ep_, raw->eager.data(), raw->eager.size(),
                                                    desc_of(eager_mr), to, &raw->op.ctx));
                // Once posted, `raw` may complete and be reused at any moment: only copies
                // from here. -FI_EAGAIN: the peer must progress (shm's first contact, a full
                // queue), so wake it too.
                if ((rc == 0 || rc == -FI_EAGAIN) && bell_) {
                    bell_->ring(dest);
                }
                return rc;
            },
            "fi_send");
    } catch (...) {
        // Refused outright (not -FI_EAGAIN): nothing is in flight, the caller gets the error.
        if (send_table::slot* failed = sends_.claim(raw->id); failed != nullptr) {
            for (auto* mr : raw->mrs) {
                fi_close(&mr->fid);
            }
            for (auto& l : raw->leases) {
                cache_->release(l);
            }
            recycle_send(failed);
        }
        throw;
    }
}

void libfabric_transport::complete_send(send_state* s, std::error_code ec) {
    send_table::slot* slot = sends_.claim(s->id);
    if (slot == nullptr) {
        return; // completed already
    }
    for (auto* mr : s->mrs) {
        fi_close(&mr->fid);
    }
    for (auto& l : s->leases) {
        cache_->release(l);
    }
    if (s->on_sent) {
        s->on_sent(ec);
    }
    recycle_send(slot);
}

void libfabric_transport::recycle_send(send_table::slot* slot) noexcept {
    // What the send held goes now (the message and the handler's captures), as when the
    // state was destroyed; its vectors keep their capacity for the next send.
    send_state* s = &slot->value;
    s->msg = serialization::message();
    s->on_sent = nullptr;
    s->mrs.clear();
    s->leases.clear();
    s->eager.clear();
    s->table.clear();
    if (static_cast<std::uint32_t>(s->id) >= kept_slots || s->eager.capacity() > kept_eager) {
        std::vector<std::byte>().swap(s->eager);
        std::vector<std::byte>().swap(s->table);
    }
    s->needs_done = s->eager_done = s->remote_done = false;
    sends_.release(slot);
}

std::pair<std::uint64_t, std::uint64_t>
libfabric_transport::remote_access(void const* p, std::size_t n, send_state& s) {
    auto at = reinterpret_cast<std::uint64_t>(p);
    if (pool_attached_) {
        if (auto r = rma::find(p, n); r && r->registrar == &registrar_) {
            ++counters_.pool_chunks_sent;
            return {mr_virt_ ? at : at - reinterpret_cast<std::uint64_t>(r->base), r->reg.key};
        }
    }
    auto l = cache_->acquire(p, n);
    ++(l.hit() ? counters_.registration_cache_hits : counters_.registration_cache_misses);
    s.leases.push_back(l);
    auto key = l.reg().key;
    std::uint64_t offset = at - l.start();
    return {mr_virt_ ? at : offset, key};
}

std::shared_ptr<std::byte[]> libfabric_transport::receive_buffer(std::size_t n, bool rma_chunk) {
    if (rma_chunk) {
        try {
            auto b = rma::allocate_shared(n);
            ++counters_.pool_receive_buffers;
            return b;
        } catch (rma::pool_exhausted const&) {
            // Over the pool's limit: the bytes still arrive; a loader that needs pool memory
            // then reports the limit itself.
        }
    }
    bool reused = false;
    auto b = pool_->get(n, reused);
    counters_.receive_buffers_reused += reused;
    return b;
}

void libfabric_transport::send_done(std::uint32_t dest, std::uint64_t id) {
    wire::header h{};
    h.magic = wire::magic;
    h.version = wire::version;
    h.kind = wire::done;
    h.token = opts_.job_token;
    h.source = rank_;
    h.send_id = id;
    fi_addr_t to = peers_[dest];
    post_or_defer(
        [this, h, to, dest] {
            long rc = static_cast<long>(fi_inject(ep_, &h, sizeof h, to));
            if ((rc == 0 || rc == -FI_EAGAIN) && bell_) {
                bell_->ring(dest);
            }
            return rc;
        },
        "fi_inject");
}

bool libfabric_transport::progress() {
    // One poller at a time (others have nothing to add and would only contend on the CQ;
    // libfabric 1.17's tcp/rxm also crashed here with concurrent fi_cq_read + fi_trywait).
    std::unique_lock poll_lock(poll_mutex_, std::try_to_lock);
    if (!poll_lock) {
        return false;
    }
    bool any = false;
    if (admit_pending_.load(std::memory_order_relaxed) &&
        admit_pending_.exchange(false, std::memory_order_acq_rel)) {
        any = admit_deferred();
    }
    fi_cq_msg_entry entries[16];
    for (;;) {
        ssize_t n = fi_cq_read(cq_, entries, 16);
        if (n == -FI_EAGAIN) {
            break;
        }
        if (n == -FI_EAVAIL) {
            fi_cq_err_entry err{};
            fi_cq_readerr(cq_, &err, 0);
            auto* o = static_cast<op*>(err.op_context);
            std::fprintf(stderr, "courier: libfabric completion error: %s\n",
                         fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0));
            if (o != nullptr && o->k == op::kind::send) {
                complete_send(static_cast<send_op*>(o)->s,
                              std::make_error_code(std::errc::connection_reset));
            } else if (o != nullptr && o->k == op::kind::read) {
                auto* in = static_cast<read_op*>(o)->in;
                in->failed = true;
                if (--in->outstanding == 0) {
                    finish_incoming(in);
                }
            }
            any = true;
            continue;
        }
        if (n < 0) {
            throw std::runtime_error(fi_message("fi_cq_read", n));
        }
        any = true;
        for (ssize_t i = 0; i < n; ++i) {
            auto* o = static_cast<op*>(entries[i].op_context);
            switch (o->k) {
            case op::kind::recv: {
                handle_recv(static_cast<recv_op*>(o), entries[i].len);
                break;
            }
            case op::kind::send: {
                auto* s = static_cast<send_op*>(o)->s;
                s->eager_done = true;
                if (!s->needs_done || s->remote_done) {
                    complete_send(s, {});
                }
                break;
            }
            case op::kind::read: {
                auto* in = static_cast<read_op*>(o)->in;
                if (--in->outstanding == 0) {
                    finish_incoming(in);
                }
                break;
            }
            }
        }
        if (n < 16) {
            // A partial batch: the queue was empty a moment ago. Another fi_cq_read now would
            // cost a provider progress pass (an epoll_wait on tcp) for nothing; the caller
            // comes back soon.
            break;
        }
    }
    // Retry what -FI_EAGAIN deferred, in order (the idle loop calls this constantly: the
    // empty case costs one atomic load, no lock, no allocation).
    if (backlog_size_.load(std::memory_order_acquire) == 0) {
        return any;
    }
    // One entry at a time from the front; an entry the provider still refuses goes back to
    // the front and the pass ends (taking the whole backlog out and putting the rest back
    // cost a move per waiting entry on every pass: quadratic under a flood).
    for (;;) {
        std::pair<std::function<long()>, char const*> item;
        {
            std::lock_guard g(mutex_);
            if (backlog_.empty()) {
                break;
            }
            item = std::move(backlog_.front());
            backlog_.pop_front();
            backlog_size_.store(backlog_.size(), std::memory_order_release);
        }
        long rc = item.first();
        if (rc == -FI_EAGAIN) {
            std::lock_guard g(mutex_);
            backlog_.push_front(std::move(item));
            backlog_size_.store(backlog_.size(), std::memory_order_release);
            break;
        }
        if (rc != 0) {
            std::fprintf(stderr, "courier: %s\n", fi_message(item.second, rc).c_str());
        }
        any = true;
    }
    return any;
}

void libfabric_transport::handle_recv(recv_op* r, std::size_t len) {
    std::byte const* p = r->buf.get();
    wire::header h;
    bool ok = len >= sizeof h;
    if (ok) {
        std::memcpy(&h, p, sizeof h);
        ok = h.magic == wire::magic && h.version == wire::version && h.token == opts_.job_token &&
             h.source < peers_.size();
    }
    if (!ok) {
        std::fprintf(stderr, "courier: dropped a message with a bad header or job token\n");
    } else if (h.kind == wire::done) {
        // Only the poller completes sends, so the slot stays as found until complete_send.
        if (send_table::slot* slot = sends_.find(h.send_id); slot != nullptr) {
            slot->value.remote_done = true;
            if (slot->value.eager_done) {
                complete_send(&slot->value, {});
            }
        }
    } else if (h.kind == wire::parcel) {
        try {
            admit_parcel(h, p, len);
        } catch (std::exception const& e) {
            std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n",
                         h.source, e.what());
        }
    }
    post_recv(r);
}

/// Bytes the descriptors at `p` (n_desc of them; the one at `chunk_count`, if any, is the
/// non-inline index) have the receiver read: pointer/rma chunks and a non-inline index.
std::size_t bytes_to_read(std::byte const* p, std::size_t n_desc, std::uint32_t chunk_count) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n_desc; ++i) {
        wire::descriptor d;
        std::memcpy(&d, p + i * sizeof d, sizeof d);
        if (i == chunk_count ||
            d.type != static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            total += static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
        }
    }
    return total;
}

/// Bytes a parcel's rendezvous will read (pointer/rma chunks and a non-inline index), from
/// its descriptors; 0 if none or if the message is malformed (handle_parcel then rejects it).
std::size_t rendezvous_bytes(wire::header const& h, std::byte const* p, std::size_t len) {
    if ((h.flags & wire::descriptors_remote) != 0) {
        if (len < sizeof h + sizeof(wire::descriptor)) {
            return 0;
        }
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h, sizeof d);
        return static_cast<std::size_t>(std::min<std::uint64_t>(d.size, SIZE_MAX / 4));
    }
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::size_t n_desc = std::size_t{h.chunk_count} + (index_inline ? 0 : 1);
    if (n_desc > (len - sizeof h) / sizeof(wire::descriptor)) {
        return 0;
    }
    return bytes_to_read(p + sizeof h, n_desc, h.chunk_count);
}

void libfabric_transport::admit_parcel(wire::header const& h, std::byte const* p, std::size_t len) {
    std::size_t rma = rendezvous_bytes(h, p, len);
    if (rma != 0) {
        std::lock_guard g(mutex_);
        if (reading_bytes_ != 0 && reading_bytes_ + rma > opts_.read_budget) {
            deferred_.push_back({h, std::vector<std::byte>(p, p + len), rma});
            ++counters_.deferred_rendezvous;
            return;
        }
        reading_bytes_ += rma;
    }
    try {
        handle_parcel(h, p, len, rma);
    } catch (...) {
        release_read_budget(rma);
        throw;
    }
}

void libfabric_transport::release_read_budget(std::size_t bytes) {
    if (bytes == 0) {
        return;
    }
    std::lock_guard g(mutex_);
    reading_bytes_ -= bytes;
    if (!deferred_.empty()) {
        admit_pending_.store(true, std::memory_order_release);
    }
}

bool libfabric_transport::admit_deferred() {
    bool any = false;
    for (;;) {
        deferred_parcel next;
        {
            std::lock_guard g(mutex_);
            if (deferred_.empty() ||
                (reading_bytes_ != 0 &&
                 reading_bytes_ + deferred_.front().rma_bytes > opts_.read_budget)) {
                return any;
            }
            next = std::move(deferred_.front());
            deferred_.pop_front();
            reading_bytes_ += next.rma_bytes;
        }
        any = true;
        try {
            handle_parcel(next.h, next.eager.data(), next.eager.size(), next.rma_bytes);
        } catch (std::exception const& e) {
            std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n",
                         next.h.source, e.what());
            std::lock_guard g(mutex_);
            reading_bytes_ -= next.rma_bytes; // give it back and try the next one
        }
    }
}

void libfabric_transport::handle_parcel(wire::header const& h, std::byte const* p, std::size_t len,
                                        std::size_t rma_bytes) {
    bool index_inline = (h.flags & wire::index_inline) != 0;
    if ((h.flags & wire::descriptors_remote) != 0) {
        // Phase one: read the descriptor table, then continue in finish_incoming.
        std::size_t fixed = sizeof h + sizeof(wire::descriptor);
        wire::descriptor t;
        if (fixed > len) {
            throw serialization::serialization_error("eager message sizes are inconsistent");
        }
        std::memcpy(&t, p + sizeof h, sizeof t);
        std::uint64_t want =
            (std::uint64_t{h.chunk_count} + (index_inline ? 0 : 1)) * sizeof(wire::descriptor);
        if (t.type != wire::descriptor_table_type || h.chunk_count > wire::max_chunks ||
            t.size != want || (index_inline && h.index_size != len - fixed)) {
            throw serialization::serialization_error("bad descriptor table for " +
                                                     std::to_string(h.chunk_count) + " chunks");
        }
        auto in = std::make_unique<incoming>();
        in->source = h.source;
        in->send_id = h.send_id;
        in->rma_bytes = rma_bytes;
        in->table_phase = true;
        in->h = h;
        in->table.resize(static_cast<std::size_t>(t.size));
        if (index_inline) {
            in->inline_index.assign(p + fixed, p + fixed + h.index_size);
        }
        // The table is read where a non-inline index would be (start_reads knows the phase).
        start_reads(std::move(in), {t}, /*index_inline=*/false);
        return;
    }
    std::size_t n_desc = h.chunk_count + (index_inline ? 0 : 1);
    std::size_t fixed = sizeof h + n_desc * sizeof(wire::descriptor);
    if (h.chunk_count > recv_size_ || fixed > len || (index_inline && h.index_size > len - fixed)) {
        throw serialization::serialization_error("eager message sizes are inconsistent");
    }
    auto descriptor = [&](std::size_t i) {
        wire::descriptor d;
        std::memcpy(&d, p + sizeof h + i * sizeof d, sizeof d);
        return d;
    };
    if (index_inline && rma_bytes == 0) {
        // Eager only (the common small parcel): the message is built straight from the receive
        // buffer — one copy of the index data, no bookkeeping object.
        std::vector<serialization::serialization_chunk> chunks;
        chunks.reserve(h.chunk_count);
        std::size_t offset = 0;
        for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
            auto d = descriptor(i);
            if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index)) {
                chunks.push_back({serialization::chunk_type::index, d.size, offset, nullptr, 0});
                offset += d.size;
            } else if (d.size == 0 &&
                       (d.type == static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
                        d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma))) {
                chunks.push_back(
                    {static_cast<serialization::chunk_type>(d.type), 0, 0, nullptr, 0});
            } else {
                throw serialization::serialization_error(
                    "bad chunk descriptor (type " + std::to_string(d.type) + ", " +
                    std::to_string(d.size) + " bytes) in an eager-only parcel");
            }
        }
        if (offset != h.index_size) {
            throw serialization::serialization_error(
                "index chunks do not add up to the index size");
        }
        auto m = serialization::message::from_parts({p + fixed, h.index_size}, std::move(chunks));
        ++counters_.messages_received;
        if (on_receive_) {
            on_receive_(h.source, std::move(m));
        }
        return;
    }
    std::vector<wire::descriptor> ds(n_desc);
    for (std::size_t i = 0; i < n_desc; ++i) {
        ds[i] = descriptor(i);
    }
    begin_reads(h, ds, index_inline, p + fixed, rma_bytes);
}

void libfabric_transport::begin_reads(wire::header const& h,
                                      std::vector<wire::descriptor> const& ds, bool index_inline,
                                      std::byte const* inline_index, std::size_t rma_bytes) {
    if (ds.size() != std::size_t{h.chunk_count} + (index_inline ? 0 : 1) ||
        (!index_inline &&
         (ds.back().type != wire::index_buffer_type || ds.back().size != h.index_size))) {
        throw serialization::serialization_error("descriptors do not match the header");
    }
    auto in = std::make_unique<incoming>();
    in->source = h.source;
    in->send_id = h.send_id;
    in->rma_bytes = rma_bytes;
    std::size_t offset = 0;
    for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
        auto const& d = ds[i];
        if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::index)) {
            in->chunks.push_back({serialization::chunk_type::index, d.size, offset, nullptr, 0});
            in->owners.emplace_back();
            offset += d.size;
        } else if (d.type == static_cast<std::uint8_t>(serialization::chunk_type::pointer) ||
                   d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma)) {
            auto buf = receive_buffer(
                d.size, d.type == static_cast<std::uint8_t>(serialization::chunk_type::rma));
            in->chunks.push_back(
                {static_cast<serialization::chunk_type>(d.type), d.size, 0, buf.get(), 0});
            in->owners.push_back(std::move(buf));
        } else {
            throw serialization::serialization_error("unknown chunk type " +
                                                     std::to_string(d.type));
        }
    }
    if (offset != h.index_size) {
        throw serialization::serialization_error("index chunks do not add up to the index size");
    }
    in->msg = serialization::message::with_index_buffer(static_cast<std::size_t>(h.index_size));
    if (index_inline && h.index_size != 0) {
        std::memcpy(in->msg.index_buffer(), inline_index, static_cast<std::size_t>(h.index_size));
    }
    start_reads(std::move(in), ds, index_inline);
}

void libfabric_transport::start_reads(std::unique_ptr<incoming> in,
                                      std::vector<wire::descriptor> const& ds, bool index_inline) {
    auto& pieces = in->pieces;
    pieces.clear();
    in->next_piece = 0;
    auto add = [&](std::byte* local, wire::descriptor const& d) {
        for (std::uint64_t done = 0; done < d.size; done += max_read_) {
            std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(max_read_, d.size - done));
            pieces.push_back({local + done, n, d.address + done, d.key, nullptr});
        }
    };
    for (std::size_t i = 0; i < in->chunks.size(); ++i) {
        auto& c = in->chunks[i];
        if (c.type != serialization::chunk_type::index && c.size != 0) {
            add(const_cast<std::byte*>(c.address), ds[i]);
        }
    }
    if (!index_inline) {
        if (in->table_phase) {
            add(in->table.data(), ds.back()); // the descriptor table
        } else if (ds.back().size != 0) {
            add(in->msg.index_buffer(), ds.back()); // straight into the message: no copy
        }
    }
    if (mr_local_) {
        for (auto& pc : pieces) {
            if (auto r = rma::find(pc.local, pc.size); r && r->registrar == &registrar_) {
                pc.desc = r->reg.desc; // pool memory: registered already
            } else {
                fid_mr* mr = register_memory(pc.local, pc.size, FI_READ);
                in->mrs.push_back(mr);
                pc.desc = fi_mr_desc(mr);
            }
        }
    }
    incoming* raw = in.get();
    raw->outstanding = pieces.size();
    raw->reads.clear(); // a previous phase's reads have all completed
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        raw->reads.emplace_back(raw);
    }
    {
        std::lock_guard g(mutex_);
        incoming_.emplace(raw, std::move(in));
    }
    for (auto const& pc : pieces) {
        counters_.rma_bytes_read += pc.size;
    }
    if (pieces.empty()) { // only empty external chunks: nothing to read, but the sender waits
        finish_incoming(raw);
        return;
    }
    post_or_defer([this, raw] { return post_reads(raw); }, "fi_read");
}

long libfabric_transport::post_reads(incoming* in) {
    // Once the last read is posted, `in` may complete and be freed by another thread at any
    // moment: nothing of it is touched after that post.
    std::uint32_t const source = in->source;
    fi_addr_t from = peers_[source];
    std::size_t i = in->next_piece;
    std::size_t const n = in->pieces.size();
    while (i < n) {
        auto const& pc = in->pieces[i];
        read_op* rop = &in->reads[i];
        long rc = static_cast<long>(
            fi_read(ep_, pc.local, pc.size, pc.desc, from, pc.remote, pc.key, &rop->ctx));
        if (rc != 0) {
            in->next_piece = i; // not posted: `in` is still waiting for it
            if (rc == -FI_EAGAIN && bell_) {
                bell_->ring(source);
            }
            return rc;
        }
        ++i;
    }
    if (bell_) {
        bell_->ring(source); // in case the provider needs the peer's progress to serve reads
    }
    return 0;
}

void libfabric_transport::continue_after_table(std::unique_ptr<incoming> in) {
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    in->mrs.clear();
    auto fail = [&](char const* why) {
        std::fprintf(stderr, "courier: dropped a parcel from locality %u: %s\n", in->source, why);
        send_done(in->source, in->send_id);
        release_read_budget(in->rma_bytes);
    };
    if (in->failed) {
        fail("reading its descriptor table failed");
        return;
    }
    wire::header h = in->h;
    bool index_inline = (h.flags & wire::index_inline) != 0;
    std::vector<wire::descriptor> ds(in->table.size() / sizeof(wire::descriptor));
    std::memcpy(ds.data(), in->table.data(), ds.size() * sizeof(wire::descriptor));
    std::size_t payload = bytes_to_read(in->table.data(), ds.size(), h.chunk_count);
    {
        std::lock_guard g(mutex_); // admitted already: its payload joins the reads in flight
        reading_bytes_ += payload;
    }
    std::size_t budget = in->rma_bytes + payload;
    try {
        begin_reads(h, ds, index_inline, in->inline_index.data(), budget);
    } catch (std::exception const& e) {
        in->rma_bytes = budget;
        fail(e.what());
    }
}

void libfabric_transport::finish_incoming(incoming* raw) {
    std::unique_ptr<incoming> in;
    {
        std::lock_guard g(mutex_);
        auto it = incoming_.find(raw);
        if (it != incoming_.end()) {
            in = std::move(it->second);
            incoming_.erase(it);
        }
    }
    if (!in) {
        return; // already finished (cannot happen: every rendezvous is registered once)
    }
    if (in->table_phase) {
        continue_after_table(std::move(in));
        return;
    }
    ++counters_.messages_received;
    for (auto* mr : in->mrs) {
        fi_close(&mr->fid);
    }
    // Eager-only parcels never come here: every parcel that does is a rendezvous, whose
    // sender keeps its registrations until DONE.
    send_done(in->source, in->send_id);
    release_read_budget(in->rma_bytes);
    if (in->failed) {
        std::fprintf(stderr, "courier: an RMA read from locality %u failed; parcel dropped\n",
                     in->source);
        return;
    }
    serialization::message m;
    try {
        in->msg.complete_parts(std::move(in->chunks));
        m = std::move(in->msg);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n",
                     in->source, e.what());
        return;
    }
    for (std::size_t i = 0; i < in->owners.size(); ++i) {
        if (in->owners[i]) {
            m.set_chunk_owner(i, in->owners[i]);
        }
    }
    if (on_receive_) {
        on_receive_(in->source, std::move(m));
    }
}

} // namespace

std::size_t default_read_budget(std::string_view provider) noexcept {
    return provider.substr(0, provider.find(';')) == "shm" ? std::size_t{1} << 20
                                                           : std::size_t{4} << 20;
}

std::unique_ptr<transport> make_libfabric_transport(transport_options const& o) {
    return std::make_unique<libfabric_transport>(o);
}

} // namespace courier::parcelport
