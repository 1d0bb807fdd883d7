// SPDX-License-Identifier: BSL-1.0
// The native libfabric baseline for osu_courier: the same OSU tests written directly on
// FI_EP_RDM fi_send/fi_recv with pre-registered buffers and a busy-polled completion queue, the
// best a runtime on this provider could do with two-sided messages. Two processes (this one
// forks the second and exchanges endpoint names over a socketpair), pinned to cores 0 and 1.
//   osu_fabric [--provider=tcp|shm|PROVIDER] [--distinct] [--push] [--multi]
//       [--multi-size=BYTES] [--tests=...] [--max-size=BYTES] [--quick]
// --push (bw, bibw, mr): every message of a window is announced by a small untagged message,
// then sent tagged; the receiver posts the tagged receive, into a buffer of its own, only when
// the announcement arrives (as a runtime that learns a parcel's size from its header would):
// what sends pushed into receives posted per announced message can do on a provider.
// --multi (bw, mr; net only): every message is a 16-byte header and the payload in one
// fi_sendv from two places; the receiver has 4 FI_MULTI_RECV buffers of --multi-size bytes
// (1 MiB, or two of the largest messages of the run: one size for all) posted ahead, each
// re-posted when the provider returns it, where messages land one after another: what a
// runtime that sends a parcel's header and chunks as one message into receives posted before
// it knows their sizes can do. Alone: not with --push or --distinct.
// Methodology and output format: osu_common.hpp.
#include "common/tcp_provider.hpp"
#include "osu_common.hpp"
#include "osu_pair.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(char const* what, long rc) {
    std::fprintf(stderr, "osu_fabric: %s: %s (%ld)\n", what, fi_strerror(static_cast<int>(-rc)),
                 rc);
    std::exit(1);
}

void check(char const* what, long rc) {
    if (rc != 0) {
        die(what, rc);
    }
}

struct endpoint {
    fi_info* info = nullptr;
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    fid_av* av = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    bool mr_local = false;
    // Context slots: which operation a completion belongs to.
    // --push: window_recv / window_send are the announcements', data_recv / data_send the
    // tagged messages'.
    static constexpr int window_recv = 0, window_send = osu::default_window,
                         ack_recv = 2 * osu::default_window, ack_send = ack_recv + 1,
                         pingpong = ack_send + 1, data_recv = pingpong + 2,
                         data_send = data_recv + osu::default_window,
                         multi_recv = data_send + osu::default_window, multi_buffers = 4,
                         slots = multi_recv + multi_buffers;
    std::vector<fi_context2> ctx = std::vector<fi_context2>(slots);
    struct {
        int window_recv = 0, window_send = 0, ack_recv = 0, ack_send = 0, data_recv = 0,
            data_send = 0, other = 0;
    } counts;
    // --push: announcement slots completed, for the receiver to post their receives (not kept
    // otherwise: the plain baseline does no work per completion beyond counting it).
    bool push = false;
    std::vector<int> announced;
    // --multi: receives land in multi-receive buffers; those the provider returned, to re-post.
    bool multi = false;
    std::vector<int> returned;

    void count(void* op_context, std::uint64_t flags = 0) {
        auto slot = static_cast<fi_context2*>(op_context) - ctx.data();
        if (slot >= multi_recv) {
            if ((flags & FI_RECV) != 0) {
                ++counts.window_recv;
            }
            if ((flags & FI_MULTI_RECV) != 0) {
                returned.push_back(static_cast<int>(slot - multi_recv));
            }
        } else if (slot >= data_send) {
            ++counts.data_send;
        } else if (slot >= data_recv) {
            ++counts.data_recv;
        } else if (slot < window_send) {
            ++counts.window_recv;
            if (push) {
                announced.push_back(static_cast<int>(slot));
            }
        } else if (slot < ack_recv) {
            ++counts.window_send;
        } else if (slot == ack_recv) {
            ++counts.ack_recv;
        } else if (slot == ack_send) {
            ++counts.ack_send;
        } else {
            ++counts.other;
        }
    }
    /// Reads what the completion queue has (busy polling, as OSU does).
    void poll() {
        ssize_t got = 0;
        if (multi) {
            fi_cq_msg_entry entries[16];
            got = fi_cq_read(cq, entries, 16);
            for (ssize_t i = 0; i < got; ++i) {
                // A returned buffer's last completion may carry no message (len 0).
                auto flags = entries[i].flags;
                if (entries[i].len == 0 && (flags & FI_MULTI_RECV) != 0) {
                    flags &= ~std::uint64_t(FI_RECV);
                }
                count(entries[i].op_context, flags);
            }
        } else {
            fi_cq_entry entries[16];
            got = fi_cq_read(cq, entries, 16);
            for (ssize_t i = 0; i < got; ++i) {
                count(entries[i].op_context);
            }
        }
        if (got == -FI_EAVAIL) {
            fi_cq_err_entry err{};
            fi_cq_readerr(cq, &err, 0);
            std::fprintf(stderr, "osu_fabric: completion error: %s\n", fi_strerror(err.err));
            std::exit(1);
        }
        if (got < 0 && got != -FI_EAGAIN) {
            die("fi_cq_read", got);
        }
    }

    /// `pushes`: --push (FI_TAGGED, and announcements kept); `multis`: --multi (FI_MULTI_RECV,
    /// completions with flags, and no message smaller than `min_multi` left in a buffer).
    endpoint(std::string const& provider, bool pushes, bool multis, std::size_t min_multi)
        : push(pushes), multi(multis) {
        fi_info* hints = fi_allocinfo();
        hints->caps = FI_MSG | (push ? FI_TAGGED : 0) | (multi ? FI_MULTI_RECV : 0);
        hints->mode = FI_CONTEXT | FI_CONTEXT2;
        hints->ep_attr->type = FI_EP_RDM;
        hints->tx_attr->msg_order = FI_ORDER_SAS; // window and acknowledgement match in order
        hints->rx_attr->msg_order = FI_ORDER_SAS;
        hints->domain_attr->mr_mode =
            FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints->fabric_attr->prov_name = strdup(provider.c_str());
        if (provider.rfind("tcp", 0) == 0 || provider == "net") {
            hints->domain_attr->name = strdup("lo");
        }
        int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
        fi_freeinfo(hints);
        if (rc != 0) {
            die(("fi_getinfo " + provider).c_str(), rc);
        }
        mr_local = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
        check("fi_fabric", fi_fabric(info->fabric_attr, &fabric, nullptr));
        check("fi_domain", fi_domain(fabric, info, &domain, nullptr));
        fi_av_attr av_attr{};
        av_attr.type = FI_AV_TABLE;
        check("fi_av_open", fi_av_open(domain, &av_attr, &av, nullptr));
        fi_cq_attr cq_attr{};
        cq_attr.format = multi ? FI_CQ_FORMAT_MSG : FI_CQ_FORMAT_CONTEXT;
        cq_attr.size = 1024;
        check("fi_cq_open", fi_cq_open(domain, &cq_attr, &cq, nullptr));
        check("fi_endpoint", fi_endpoint(domain, info, &ep, nullptr));
        check("fi_ep_bind av", fi_ep_bind(ep, &av->fid, 0));
        check("fi_ep_bind cq", fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
        if (multi) {
            if (info->tx_attr->iov_limit < 2) {
                die("--multi: the provider sends no two-part message", -FI_ENOSYS);
            }
            check("fi_setopt FI_OPT_MIN_MULTI_RECV",
                  fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_multi,
                            sizeof min_multi));
        }
        check("fi_enable", fi_enable(ep));
    }

    std::vector<char> name() const {
        std::vector<char> a(256);
        std::size_t len = a.size();
        check("fi_getname", fi_getname(&ep->fid, a.data(), &len));
        a.resize(len);
        return a;
    }

    void connect(std::vector<char> const& addr) {
        if (fi_av_insert(av, addr.data(), 1, &peer, 0, nullptr) != 1) {
            die("fi_av_insert", -FI_EINVAL);
        }
    }

    fid_mr* reg(void* p, std::size_t n) {
        if (!mr_local) {
            return nullptr;
        }
        fid_mr* mr = nullptr;
        check("fi_mr_reg", fi_mr_reg(domain, p, n, FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr));
        return mr;
    }

    /// Waits until `n` more completions of any kind arrived.
    void wait(int n) {
        int target = total() + n;
        while (total() < target) {
            poll();
        }
    }
    int total() const {
        return counts.window_recv + counts.window_send + counts.ack_recv + counts.ack_send +
               counts.data_recv + counts.data_send + counts.other;
    }

    /// Posts a receive or a send (`op` is fi_recv or fi_send); on -FI_EAGAIN, progresses
    /// (counting completions) and retries.
    template <class Op>
    void post(Op op, char const* what, void* p, std::size_t n, fid_mr* mr, int slot) {
        for (;;) {
            ssize_t rc = op(ep, p, n, mr != nullptr ? fi_mr_desc(mr) : nullptr, peer,
                            &ctx[static_cast<std::size_t>(slot)]);
            if (rc == 0) {
                return;
            }
            if (rc != -FI_EAGAIN) {
                die(what, rc);
            }
            poll();
        }
    }
    void post_trecv(void* p, std::size_t n, fid_mr* mr, std::uint64_t tag, int slot) {
        post([tag](fid_ep* e, void* b, std::size_t len, void* desc, fi_addr_t from,
                   void* ctx_) { return fi_trecv(e, b, len, desc, from, tag, 0, ctx_); },
             "fi_trecv", p, n, mr, slot);
    }
    void post_tsend(void* p, std::size_t n, fid_mr* mr, std::uint64_t tag, int slot) {
        post([tag](fid_ep* e, void* b, std::size_t len, void* desc, fi_addr_t to,
                   void* ctx_) { return fi_tsend(e, b, len, desc, to, tag, ctx_); },
             "fi_tsend", p, n, mr, slot);
    }
    void post_recv(void* p, std::size_t n, fid_mr* mr, int slot) {
        post(fi_recv, "fi_recv", p, n, mr, slot);
    }
    /// --multi: a multi-receive buffer.
    void post_multi(void* p, std::size_t n, fid_mr* mr, int k) {
        post(
            [](fid_ep* e, void* b, std::size_t len, void* desc, fi_addr_t from, void* ctx_) {
                iovec iov{b, len};
                fi_msg msg{&iov, &desc, 1, from, ctx_, 0};
                return fi_recvmsg(e, &msg, FI_MULTI_RECV);
            },
            "fi_recvmsg FI_MULTI_RECV", p, n, mr, multi_recv + k);
    }
    /// --multi: a header and a payload as one message.
    void post_sendv(void* h, std::size_t hn, fid_mr* hmr, void* p, std::size_t n, fid_mr* mr,
                    int slot) {
        for (;;) {
            iovec iov[2] = {{h, hn}, {p, n}};
            void* desc[2] = {hmr != nullptr ? fi_mr_desc(hmr) : nullptr,
                             mr != nullptr ? fi_mr_desc(mr) : nullptr};
            ssize_t rc = fi_sendv(ep, iov, desc, 2, peer, &ctx[static_cast<std::size_t>(slot)]);
            if (rc == 0) {
                return;
            }
            if (rc != -FI_EAGAIN) {
                die("fi_sendv", rc);
            }
            poll();
        }
    }
    void post_send(void* p, std::size_t n, fid_mr* mr, int slot) {
        post([](fid_ep* e, void* b, std::size_t len, void* desc, fi_addr_t to,
                void* ctx_) { return fi_send(e, b, len, desc, to, ctx_); },
             "fi_send", p, n, mr, slot);
    }

    /// Closes the endpoint (the receives still posted with it), before the memory they use.
    void close_endpoint() {
        if (ep != nullptr) {
            fi_close(&ep->fid);
            ep = nullptr;
        }
    }
    ~endpoint() {
        close_endpoint();
        fi_close(&cq->fid);
        fi_close(&av->fid);
        fi_close(&domain->fid);
        fi_close(&fabric->fid);
        fi_freeinfo(info);
    }
};

/// Both processes run this; rank 0 times and reports.
void run(int rank, int sock, std::string const& provider, osu::plan const& plan, bool distinct,
         bool push, bool multi, std::size_t multi_size) {
    osu::pin(rank);
    std::size_t max = std::max<std::size_t>(plan.max_size(), 8);
    constexpr std::size_t header = 16;
    endpoint e(provider, push, multi, max + header);
    e.connect(osu::exchange(sock, e.name(), "osu_fabric"));

    std::vector<char> sbuf(max, 'a'), rbuf(max, 'b');
    // --distinct: every message of a window lands in its own buffer, as it must in a runtime
    // whose receiver keeps each message's data (OSU reuses one buffer, which stays in cache).
    std::vector<char> window_bufs(distinct ? osu::window * max : 0, 'c');
    char ack_s[8] = {}, ack_r[8] = {};
    // --push: the announcements, one per message of a window (its tag: the window slot).
    std::vector<std::uint64_t> ann_s(osu::window), ann_r(osu::window);
    for (int w = 0; w < osu::window; ++w) {
        ann_s[static_cast<std::size_t>(w)] = static_cast<std::uint64_t>(w);
    }
    fid_mr* smr = e.reg(sbuf.data(), max);
    fid_mr* rmr = e.reg(rbuf.data(), max);
    fid_mr* wmr = distinct ? e.reg(window_bufs.data(), window_bufs.size()) : nullptr;
    fid_mr* amr_s = e.reg(ack_s, sizeof ack_s);
    fid_mr* amr_r = e.reg(ack_r, sizeof ack_r);
    fid_mr* annmr_s = e.reg(ann_s.data(), ann_s.size() * sizeof ann_s[0]);
    fid_mr* annmr_r = e.reg(ann_r.data(), ann_r.size() * sizeof ann_r[0]);
    std::string prov = e.info->fabric_attr->prov_name;
    // --multi: the headers a sender sends from, and the multi-receive buffers, posted once.
    std::vector<char> headers(multi ? osu::window * header : 0, 'h');
    std::vector<char> multi_bufs(multi ? endpoint::multi_buffers * multi_size : 0);
    fid_mr* hmr = multi ? e.reg(headers.data(), headers.size()) : nullptr;
    fid_mr* mmr = multi ? e.reg(multi_bufs.data(), multi_bufs.size()) : nullptr;
    auto post_multi = [&](int k) {
        e.post_multi(multi_bufs.data() + std::size_t(k) * multi_size, multi_size, mmr, k);
    };
    if (multi && rank == 1) {
        for (int k = 0; k < endpoint::multi_buffers; ++k) {
            post_multi(k);
        }
    }

    for (auto const& test : plan.tests) {
        if (push && test == "latency") {
            if (rank == 0) {
                std::fprintf(stderr, "osu_fabric: --push changes bw, bibw and mr only: latency "
                                     "skipped\n");
            }
            continue;
        }
        if (multi && test != "bw" && test != "mr") {
            if (rank == 0) {
                std::fprintf(stderr, "osu_fabric: --multi runs bw and mr only: %s skipped\n",
                             test.c_str());
            }
            continue;
        }
        for (std::size_t size : plan.sizes) {
            double value = 0;
            if (test == "latency") {
                int skip = plan.latency_skip(size), iters = plan.latency_iterations(size);
                clock_type::time_point t0;
                for (int i = 0; i < skip + iters; ++i) {
                    if (i == skip) {
                        t0 = clock_type::now();
                    }
                    e.post_recv(rbuf.data(), size, rmr, endpoint::pingpong);
                    if (rank == 0) {
                        e.post_send(sbuf.data(), size, smr, endpoint::pingpong + 1);
                        e.wait(2);
                    } else {
                        e.wait(1);
                        e.post_send(sbuf.data(), size, smr, endpoint::pingpong + 1);
                        e.wait(1);
                    }
                }
                value = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() /
                        iters / 2;
            } else if (test == "bw" || test == "bibw" || test == "mr") {
                bool bi = test == "bibw";
                bool sends = rank == 0 || bi, receives = rank == 1 || bi;
                int skip = plan.bw_skip(size), loops = plan.bw_loops(size) * (test == "mr" ? 4 : 1);
                clock_type::time_point t0;
                for (int l = 0; l < skip + loops; ++l) {
                    if (l == skip) {
                        t0 = clock_type::now();
                    }
                    // --multi: the receives are posted ahead, so messages of this window may
                    // have come (and been counted) while the last one's acknowledgement went.
                    int const early = multi ? e.counts.window_recv : 0;
                    e.counts = {};
                    e.counts.window_recv = early;
                    if (receives && !multi) {
                        for (int w = 0; w < osu::window; ++w) {
                            if (push) {
                                e.post_recv(&ann_r[static_cast<std::size_t>(w)], sizeof ann_r[0],
                                            annmr_r, endpoint::window_recv + w);
                                continue;
                            }
                            char* dst =
                                distinct ? window_bufs.data() + std::size_t(w) * max : rbuf.data();
                            e.post_recv(dst, size, distinct ? wmr : rmr, endpoint::window_recv + w);
                        }
                    }
                    if (sends) {
                        e.post_recv(ack_r, sizeof ack_r, amr_r, endpoint::ack_recv);
                        for (int w = 0; w < osu::window; ++w) {
                            if (multi) {
                                e.post_sendv(headers.data() + std::size_t(w) * header, header, hmr,
                                             sbuf.data(), size, smr, endpoint::window_send + w);
                                continue;
                            }
                            if (push) {
                                e.post_send(&ann_s[static_cast<std::size_t>(w)], sizeof ann_s[0],
                                            annmr_s, endpoint::window_send + w);
                                e.post_tsend(sbuf.data(), size, smr, static_cast<std::uint64_t>(w),
                                             endpoint::data_send + w);
                                continue;
                            }
                            e.post_send(sbuf.data(), size, smr, endpoint::window_send + w);
                        }
                    }
                    if (receives) {
                        auto landed = [&] {
                            return push ? e.counts.data_recv : e.counts.window_recv;
                        };
                        while (landed() < osu::window) {
                            e.poll();
                            // Each announcement names its message: post its receive now, into
                            // a buffer of its own.
                            // By index: a post that polls on -FI_EAGAIN may add to the list.
                            for (std::size_t k = 0; k < e.announced.size(); ++k) {
                                auto tag = ann_r[static_cast<std::size_t>(e.announced[k])];
                                e.post_trecv(window_bufs.data() + tag * max, size, wmr, tag,
                                             endpoint::data_recv + static_cast<int>(tag));
                            }
                            e.announced.clear();
                            for (std::size_t k = 0; k < e.returned.size(); ++k) {
                                post_multi(e.returned[k]);
                            }
                            e.returned.clear();
                        }
                        if (multi) {
                            e.counts.window_recv -= osu::window; // the next window's, if any
                        }
                        e.post_send(ack_s, sizeof ack_s, amr_s, endpoint::ack_send);
                        while (e.counts.ack_send < 1) {
                            e.poll();
                        }
                    }
                    if (sends) {
                        while (e.counts.window_send < osu::window || e.counts.ack_recv < 1 ||
                               (push && e.counts.data_send < osu::window)) {
                            e.poll();
                        }
                    }
                }
                double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
                value = test == "mr"
                            ? osu::window * loops / secs // one pair: messages per second
                            : double(size) * osu::window * loops * (bi ? 2 : 1) / secs / 1e6;
            }
            if (rank == 0) {
                osu::report(multi      ? "libfabric-multi"
                            : push     ? "libfabric-push"
                            : distinct ? "libfabric-distinct"
                                       : "libfabric",
                            prov.find("tcp") != std::string::npos || prov == "net" ? "tcp" : prov,
                            1, test, size, value);
            }
        }
    }
    e.close_endpoint(); // --multi's buffers are still posted
    for (fid_mr* mr : {smr, rmr, wmr, amr_s, amr_r, annmr_s, annmr_r, hmr, mmr}) {
        if (mr != nullptr) {
            fi_close(&mr->fid);
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> rest;
    auto plan = osu::parse(argc, argv, &rest);
    if (osu::window != osu::default_window) {
        std::fprintf(stderr,
                     "osu_fabric: its completion contexts are laid out for windows of %d "
                     "messages: no --window\n",
                     osu::default_window);
        return 2;
    }
    std::string provider = "tcp";
    bool distinct = false, push = false, multi = false;
    std::size_t multi_size = 0; // --multi-size, else 1 MiB or room for two of the largest messages
    for (auto const& a : rest) {
        if (a == "--distinct") {
            distinct = true;
        } else if (a == "--push") {
            push = true;
            distinct = true;
        } else if (a == "--multi") {
            multi = true;
        } else if (a.rfind("--multi-size=", 0) == 0) {
            char* end = nullptr;
            multi_size = std::strtoull(a.c_str() + 13, &end, 10);
            if (multi_size == 0 || *end != '\0') {
                std::fprintf(stderr, "osu_fabric: --multi-size: expected bytes, e.g. 1048576\n");
                return 2;
            }
        } else if (a.rfind("--provider=", 0) == 0) {
            provider = a.substr(11);
        } else {
            std::fprintf(stderr, "osu_fabric: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (provider == "tcp") {
        provider = courier::bench::tcp_provider();
    }
    std::size_t const largest = std::max<std::size_t>(plan.max_size(), 8) + 16;
    if (multi_size == 0) {
        // One size for the whole run, from its largest message: small messages ran slower in
        // larger buffers (benchmarks/RESULTS.md, "Multi-receive buffers on net").
        multi_size = std::max<std::size_t>(std::size_t(1) << 20, 2 * largest);
    }
    if (multi && (push || distinct)) {
        std::fprintf(stderr, "osu_fabric: --multi goes alone, without --push or --distinct\n");
        return 2;
    }
    if (multi && multi_size < largest) {
        std::fprintf(stderr, "osu_fabric: --multi-size=%zu holds no message of %zu bytes\n",
                     multi_size, largest);
        return 2;
    }
    if (multi && provider != "net") {
        // shm in libfabric 1.17 crashes in fi_setopt(FI_OPT_MIN_MULTI_RECV).
        std::fprintf(stderr, "osu_fabric: --multi runs over net only, not %s\n", provider.c_str());
        return 2;
    }
    return osu::run_pair([&](int rank, int sock) {
        run(rank, sock, provider, plan, distinct, push, multi, multi_size);
        return 0;
    });
}
