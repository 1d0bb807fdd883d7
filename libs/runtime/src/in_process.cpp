// SPDX-License-Identifier: BSL-1.0
// Several localities in one process over the loopback transport (in_process.hpp).
#include "in_process.hpp"

#include "distributed.hpp"
#include "log.hpp"
#include "parcel_send.hpp"

#include <courier/runtime/detail/task.hpp>

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace courier::detail {

in_process_job::in_process_job(in_process_options const& o)
    : opts_(o), hub_(parcelport::loopback_hub::create({o.localities, o.seed})) {
    if (current_scheduler() != nullptr) {
        // Its workers would find the runtime's scheduler and state, not their own.
        throw std::logic_error("courier: an in_process_job cannot run inside a running runtime");
    }
    courier::logging::set_prefix_provider(&log_prefix);
    std::vector<std::vector<std::byte>> addresses;
    for (std::uint32_t r = 0; r < o.localities; ++r) {
        auto l = std::make_unique<locality>();
        l->state.rank = r;
        l->state.size = o.localities;
        l->state.dead = std::vector<std::atomic<bool>>(o.localities);
        flow_configure(l->state.flow, o.flow_window_parcels, o.flow_window_bytes, o.localities);
        l->state.tp = parcelport::make_loopback_transport(hub_, r);
        l->state.tp->set_job_token(1);
        // A send with no handler of its own (send_parcel) only ends: counted, per batch.
        l->state.tp->set_counted_handler(
            [](std::size_t sends, std::error_code) { count_send_ended(here(), sends); });
        l->state.tp->set_counted_failure_handler(
            [](std::uint64_t tag) { counted_send_failed(send_undo::of(tag)); });
        if (o.observer) {
            l->state.tp->set_receive_handler(
                [r, seen = o.observer](std::uint32_t src, serialization::message&& m) {
                    seen(r, src, m);
                    deliver(src, std::move(m));
                });
        } else {
            l->state.tp->set_receive_handler(
                [](std::uint32_t src, serialization::message&& m) { deliver(src, std::move(m)); });
            l->state.tp->set_batch_handler(
                [](std::uint32_t src, std::span<std::span<std::byte const> const> parcels) {
                    deliver_batch(src, parcels);
                });
        }
        addresses.push_back(l->state.tp->address());
        localities_.push_back(std::move(l));
    }
    for (auto& l : localities_) {
        l->state.tp->set_peers(addresses, l->state.rank);
        set_stream_limits(l->state);
        scheduler_options so;
        so.threads = o.threads;
        so.bind = false;
        so.oversubscribed = true; // localities * threads workers share the machine's cores
        l->sched = std::make_unique<scheduler>(so);
        l->sched->locality = &l->state;
        parcelport::transport* tp = l->state.tp.get();
        locality_state* st = &l->state;
        l->hook = l->sched->register_hook(
            [tp, st] {
                flow_send_kept_credits(*st);
                return tp->progress();
            },
            tp->wait_fd(), [tp] { return tp->can_sleep(); },
            // delayed messages ring nothing when due
            parcelport::wait_coverage::partial);
        l->sched->start();
    }
}

in_process_job::~in_process_job() {
    if (!drain(opts_.drain_timeout)) {
        log(log_level::error, "in-process job: work left at shutdown");
    }
    for (auto& l : localities_) {
        l->sched->unregister_hook(l->hook);
        l->sched->stop();
    }
    for (auto& l : localities_) {
        clear_components(l->state);
    }
    localities_.clear();
}

void in_process_job::run_task(std::uint32_t rank, std::function<void()> body) {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    localities_.at(rank)->sched->spawn(make_task([&] {
        try {
            body();
        } catch (...) {
            error = std::current_exception();
        }
        std::lock_guard g(m);
        done = true;
        cv.notify_all();
    }));
    std::unique_lock g(m);
    cv.wait(g, [&] { return done; });
    g.unlock();
    if (error) {
        std::rethrow_exception(error);
    }
}

void in_process_job::run_everywhere(std::function<void(std::uint32_t)> const& f) {
    std::mutex m;
    std::condition_variable cv;
    std::size_t done = 0;
    std::exception_ptr error;
    for (auto& l : localities_) {
        std::uint32_t rank = l->state.rank;
        l->sched->spawn(make_task([&, rank] {
            std::exception_ptr e;
            try {
                f(rank);
            } catch (...) {
                e = std::current_exception();
            }
            std::lock_guard g(m);
            if (e && !error) {
                error = e;
            }
            ++done;
            cv.notify_all();
        }));
    }
    std::unique_lock g(m);
    cv.wait(g, [&] { return done == localities_.size(); });
    g.unlock();
    if (error) {
        std::rethrow_exception(error);
    }
}

bool in_process_job::drain(std::chrono::milliseconds limit, std::chrono::microseconds poll) {
    auto until = std::chrono::steady_clock::now() + limit;
    int quiet_rounds = 0;
    while (quiet_rounds < 2) {
        bool quiet = true;
        for (auto& l : localities_) {
            quiet = quiet && l->sched->live_tasks() == 0 &&
                    termination_counts_of(l->state, l->sched.get()).sends_in_flight == 0 &&
                    pending_requests(l->state) == 0 && l->state.tp->can_sleep();
        }
        quiet_rounds = quiet ? quiet_rounds + 1 : 0;
        if (std::chrono::steady_clock::now() > until) {
            return false;
        }
        std::this_thread::sleep_for(poll);
    }
    return true;
}

} // namespace courier::detail
