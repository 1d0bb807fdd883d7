// SPDX-License-Identifier: BSL-1.0
// The libfabric transport: opening and closing the endpoint, registration, the backlog of
// -FI_EAGAIN, progress (the completion queue) and incoming messages.
#include "libfabric_transport.hpp"

#include <unistd.h>

#include <random>

namespace courier::parcelport {
namespace {
/// "tcp" of "tcp;ofi_rxm": the core provider, which behaviour and defaults depend on.
std::string_view core_provider(std::string_view provider) noexcept {
    return provider.substr(0, provider.find(';'));
}

/// The per-provider defaults of transport.hpp (why each value: its comments there).
struct provider_defaults {
    std::size_t read_budget, read_piece, eager_threshold;
};
provider_defaults defaults_for(std::string_view provider) noexcept {
    auto core = core_provider(provider);
    if (core == "shm") {
        return {std::size_t{1} << 20, std::size_t{1} << 30, std::size_t{8} << 10};
    }
    if (core == "tcp") {
        return {std::size_t{2} << 20, std::size_t{256} << 10, std::size_t{64} << 10};
    }
    return {std::size_t{16} << 20, std::size_t{1} << 20, std::size_t{4} << 10};
}
} // namespace
} // namespace courier::parcelport

namespace courier::parcelport::fabric {

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
    recv_size_ = sizeof(wire::header) + opts_.eager_threshold + 32 * sizeof(wire::descriptor);
    if (core_provider(opts_.provider) == "tcp" &&
        std::getenv("FI_OFI_RXM_EAGER_LIMIT") == nullptr && recv_size_ > 16384) {
        // rxm sends a message of more than its eager limit (16 KiB by default) by segments
        // or by its own rendezvous, which on tcp costs 20-30 us (native libfabric, 32 KiB:
        // 23-34 us against 7.5 us with the limit raised). Over tcp, rxm places an eager
        // message straight into the posted buffer (no bounce buffer of that size), so our
        // eager messages go whole. Read once, when libfabric loads its providers: set before
        // the process's first fi_getinfo, and a user's own setting wins.
        ::setenv("FI_OFI_RXM_EAGER_LIMIT", std::to_string(recv_size_).c_str(), 0);
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
    max_read_ = std::min<std::size_t>(info_->ep_attr->max_msg_size, std::size_t{1} << 30);

    check("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    check("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check("fi_av_open", fi_av_open(domain_, &av_attr, &av_, nullptr));
    std::string_view core = core_provider(info_->fabric_attr->prov_name);
    shm_ = core == "shm";
    if (shm_ && opts_.split_messages && info_->tx_attr->inject_size > 2 * sizeof(wire::header)) {
        // A part must fit in the inject size with its header, and a joined message in a
        // receive buffer behind part 0's header.
        split_part_ = info_->tx_attr->inject_size;
        split_max_ =
            std::min(2 * (split_part_ - sizeof(wire::header)), recv_size_ - sizeof(wire::header));
    }
    batch_limit_ = split_part_ != 0 ? std::min(split_part_, recv_size_) : recv_size_;
    // shm names its region after the pid unless told otherwise, and a killed process leaves
    // the region behind: a later process with the same pid then fails fi_enable with EBUSY. A
    // name unique to the job and rank avoids that, and lets courier-run remove the leftovers
    // of a killed locality (the doorbell's shared word is named after it too).
    bool wants_bell = shm_ ? opts_.doorbell : (core == "tcp" && opts_.tcp_doorbell);
    std::string name = opts_.endpoint_name;
    if (name.empty() && (shm_ || wants_bell)) {
        static std::atomic<unsigned> counter{0};
        name = "courier-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
               std::to_string(std::random_device{}());
    }
    if (wants_bell) {
        try {
            bell_ = std::make_unique<detail::doorbell>(name);
        } catch (std::exception const& e) {
            std::fprintf(stderr, "courier: %s; idle workers will %s instead\n", e.what(),
                         shm_ ? "poll" : "wait on the completion queue");
        }
    }
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_MSG;
    // A wait fd lets idle workers sleep until a completion arrives, but costs on every
    // message. libfabric 1.17's shm never signals it when a peer writes into our region
    // (fi_trywait always says "busy", so idle workers spun at 100 % CPU) while every
    // completion still costs a write and a read on it (measured: 8 B round trips 2.4 -> 1.9 us
    // without it). rxm over tcp signals it through nested epoll sets: ~1.3 us per one-way
    // message (transport_options::tcp_doorbell). With a doorbell, peers wake us instead; shm
    // without one gets the scheduler's bounded-backoff sleep.
    cq_attr.wait_obj = shm_ || bell_ ? FI_WAIT_NONE : FI_WAIT_FD;
    cq_attr.size = 4096;
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) != 0) {
        cq_attr.wait_obj = FI_WAIT_NONE;
        check("fi_cq_open", fi_cq_open(domain_, &cq_attr, &cq_, nullptr));
    } else if (cq_attr.wait_obj == FI_WAIT_NONE ||
               fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) {
        wait_fd_ = -1;
    }
    check("fi_endpoint", fi_endpoint(domain_, info_, &ep_, nullptr));
    check("fi_ep_bind(av)", fi_ep_bind(ep_, &av_->fid, 0));
    check("fi_ep_bind(cq)", fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
    if (shm_) {
        check("fi_setname", fi_setname(&ep_->fid, name.data(), name.size() + 1));
    }
    check("fi_enable", fi_enable(ep_));
    // Providers that read through virtual addresses when the access happens (no pinned pages):
    // a cached registration of memory freed and mapped again still reads the new contents.
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
            // libfabric 1.17's shm reports a failed fi_read without its context: such an
            // error cannot be tied to a parcel, whose reads then never complete. The stall
            // timeout below returns their read budget.
            std::fprintf(stderr, "courier: libfabric completion error: %s%s\n",
                         fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0),
                         o == nullptr ? " (the provider did not say which operation)" : "");
            if (o != nullptr && o->k == op::kind::send) {
                auto* s = static_cast<send_op*>(o)->s;
                s->part_failed.store(true, std::memory_order_relaxed);
                if (!last_part(s)) {
                    any = true;
                    continue; // the other part of a split message completes it
                }
                out_[s->dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
                complete_send(s, std::make_error_code(std::errc::connection_reset));
            } else if (o != nullptr && o->k == op::kind::batch) {
                complete_batch(static_cast<batch_op*>(o),
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
                if (!last_part(s)) {
                    break; // the other part of a split message completes it
                }
                out_[s->dest].in_flight.fetch_sub(1, std::memory_order_acq_rel);
                if (s->part_failed.load(std::memory_order_relaxed)) {
                    complete_send(s, std::make_error_code(std::errc::connection_reset));
                    break;
                }
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
            case op::kind::batch:
                complete_batch(static_cast<batch_op*>(o), {});
                break;
            case op::kind::raw:
                break; // send_raw_for_testing: its bytes stay until close
            }
        }
        if (n < 16) {
            // A partial batch: the queue was empty a moment ago. Another fi_cq_read now would
            // cost a provider progress pass (an epoll_wait on tcp) for nothing; the caller
            // comes back soon.
            break;
        }
    }
    if ((++progress_calls_ & 255) == 0) {
        release_stalled_reads();
        drop_stale_fragments();
    }
    // Coalesced parcels wait at most until here (the message before them has had the time
    // this pass took to complete; if it has not, the batch follows it anyway).
    if (open_batches_.load(std::memory_order_acquire) != 0) {
        flush_batches();
        any = true;
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

void libfabric_transport::release_stalled_reads() {
    if (opts_.read_stall_timeout.count() <= 0) {
        return;
    }
    auto now = std::chrono::steady_clock::now();
    std::size_t freed = 0;
    std::vector<std::uint32_t> sources;
    {
        std::lock_guard g(mutex_);
        for (auto& [p, in] : incoming_) {
            if (in->outstanding != 0 && in->rma_bytes != 0 &&
                now - in->started > opts_.read_stall_timeout) {
                freed += in->rma_bytes;
                in->rma_bytes = 0; // finish_incoming then releases nothing
                sources.push_back(in->source);
                ++counters_.stalled_reads;
            }
        }
    }
    for (auto s : sources) {
        std::fprintf(stderr,
                     "courier: RMA reads from locality %u stalled for over %lld ms; their read "
                     "budget is released (the parcel stays pending until they complete)\n",
                     s, static_cast<long long>(opts_.read_stall_timeout.count()));
    }
    release_read_budget(freed);
}

void libfabric_transport::handle_recv(recv_op* r, std::size_t len) {
    std::byte const* p = r->buf.get();
    if (len >= sizeof(wire::header) &&
        std::to_integer<std::uint8_t>(p[offsetof(wire::header, kind)]) == wire::fragment) {
        wire::header h;
        std::memcpy(&h, p, sizeof h);
        if (header_ok(h)) {
            if (!handle_fragment(r, h, len)) {
                post_recv(r);
            } // else a part 0, held until its message is whole
            return;
        }
    }
    handle_message(p, len); // checks the header (and logs a fragment with a bad one)
    post_recv(r);
}

bool libfabric_transport::handle_fragment(recv_op* r, wire::header const& h, std::size_t len) {
    std::size_t part_len = len - sizeof h;
    std::uint32_t part = h.chunk_count;
    if (part > 1 || part_len == 0 || h.index_size > recv_size_ - sizeof h ||
        part_len >= h.index_size) {
        std::fprintf(stderr,
                     "courier: dropped a malformed part of a split message from locality %u "
                     "(part %u of %zu bytes, %llu in all)\n",
                     h.source, part, part_len, static_cast<unsigned long long>(h.index_size));
        return false;
    }
    auto w = std::find_if(fragments_.begin(), fragments_.end(), [&](fragment_wait const& f) {
        return f.source == h.source && f.id == h.send_id;
    });
    if (w == fragments_.end()) {
        if (fragments_.size() >= max_fragment_waits) {
            char why[96];
            std::snprintf(why, sizeof why, "its other part has not come while %zu others waited",
                          max_fragment_waits);
            drop_fragment_wait(fragments_.front(), why);
            fragments_.erase(fragments_.begin());
        }
        fragment_wait f;
        f.source = h.source;
        f.id = h.send_id;
        f.total = h.index_size;
        f.since = std::chrono::steady_clock::now();
        if (part == 0) {
            f.head = r;
            f.head_len = part_len;
        } else {
            auto const* p = r->buf.get() + sizeof h;
            f.tail.assign(p, p + part_len);
        }
        fragments_.push_back(std::move(f));
        return part == 0;
    }
    // The other part's bytes (none if this part came twice: the sum then fails, as part_len
    // is less than the whole).
    std::size_t have = part == 0 ? w->tail.size() : w->head_len;
    if (w->total != h.index_size || have + part_len != h.index_size) {
        char why[128];
        std::snprintf(why, sizeof why,
                      "its parts do not match (part %u of %zu bytes, %llu in all; %zu bytes "
                      "before)",
                      part, part_len, static_cast<unsigned long long>(h.index_size), have);
        drop_fragment_wait(*w, why);
        fragments_.erase(w);
        return false;
    }
    recv_op* head = part == 0 ? r : w->head;
    std::byte* msg = head->buf.get() + sizeof h;
    if (part == 0) {
        std::memcpy(msg + part_len, w->tail.data(), w->tail.size());
    } else {
        std::memcpy(msg + w->head_len, r->buf.get() + sizeof h, part_len);
    }
    std::size_t total = h.index_size;
    fragments_.erase(w);
    handle_message(msg, total);
    if (part == 1) {
        post_recv(head); // r, part 1's buffer, is re-posted by the caller
    }
    return false;
}

void libfabric_transport::drop_stale_fragments() {
    if (fragments_.empty() || opts_.read_stall_timeout.count() <= 0) {
        return;
    }
    auto now = std::chrono::steady_clock::now();
    char why[96];
    std::snprintf(why, sizeof why, "its other part has not come within %lld ms",
                  static_cast<long long>(opts_.read_stall_timeout.count()));
    std::erase_if(fragments_, [&](fragment_wait const& f) {
        if (now - f.since <= opts_.read_stall_timeout) {
            return false;
        }
        drop_fragment_wait(f, why);
        return true;
    });
}

void libfabric_transport::drop_fragment_wait(fragment_wait const& f, char const* why) {
    std::fprintf(stderr, "courier: dropped a split message from locality %u: %s\n", f.source, why);
    if (f.head != nullptr) {
        post_recv(f.head);
    }
}

void libfabric_transport::handle_message(std::byte const* p, std::size_t len) {
    wire::header h;
    bool ok = len >= sizeof h;
    if (ok) {
        std::memcpy(&h, p, sizeof h);
        ok = header_ok(h);
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
        admit_or_drop(h, p, len);
    } else if (h.kind == wire::batch) {
        handle_batch(h, p, len);
    } else {
        std::fprintf(stderr, "courier: dropped a message of unknown kind %u from locality %u\n",
                     static_cast<unsigned>(h.kind), h.source);
    }
}

void libfabric_transport::admit_or_drop(wire::header const& h, std::byte const* p,
                                        std::size_t len) {
    try {
        admit_parcel(h, p, len);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "courier: dropped a malformed parcel from locality %u: %s\n", h.source,
                     e.what());
    }
}

void libfabric_transport::handle_batch(wire::header const& h, std::byte const* p, std::size_t len) {
    if (h.index_size != len - sizeof h) {
        std::fprintf(stderr,
                     "courier: dropped a coalesced message from locality %u: it announces %llu "
                     "bytes of parcels and carries %zu\n",
                     h.source, static_cast<unsigned long long>(h.index_size), len - sizeof h);
        return;
    }
    std::size_t at = sizeof h;
    std::uint32_t n = 0;
    while (at < len) {
        std::uint32_t rl = 0, zero = 0;
        if (len - at < wire::record_prefix) {
            break;
        }
        std::memcpy(&rl, p + at, sizeof rl);
        std::memcpy(&zero, p + at + sizeof rl, sizeof zero);
        at += wire::record_prefix;
        if (zero != 0 || rl < sizeof(wire::header) || rl > len - at) {
            std::fprintf(stderr,
                         "courier: dropped the rest of a coalesced message from locality %u: a "
                         "record of %u bytes where %zu remain\n",
                         h.source, rl, len - at);
            return;
        }
        wire::header ih;
        std::memcpy(&ih, p + at, sizeof ih);
        if (!header_ok(ih) || ih.source != h.source || ih.kind != wire::parcel) {
            std::fprintf(stderr,
                         "courier: dropped parcel %u of a coalesced message from locality %u: "
                         "bad header\n",
                         n, h.source);
        } else {
            admit_or_drop(ih, p + at, rl);
        }
        at += wire::record_size(rl) - wire::record_prefix;
        ++n;
    }
    if (n != h.chunk_count || at != len) {
        std::fprintf(stderr,
                     "courier: a coalesced message from locality %u announced %u parcels and "
                     "held %u\n",
                     h.source, h.chunk_count, n);
    }
}

} // namespace courier::parcelport::fabric

namespace courier::parcelport {

std::size_t default_read_budget(std::string_view provider) noexcept {
    return defaults_for(provider).read_budget;
}

std::size_t default_eager_threshold(std::string_view provider) noexcept {
    return defaults_for(provider).eager_threshold;
}

std::size_t default_read_piece(std::string_view provider) noexcept {
    return defaults_for(provider).read_piece;
}

std::unique_ptr<transport> make_libfabric_transport(transport_options const& o) {
    return std::make_unique<fabric::libfabric_transport>(o);
}

} // namespace courier::parcelport
