// SPDX-License-Identifier: BSL-1.0
// The trace recorder (trace.hpp) and its file: Chrome trace-event JSON, object form:
//   {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}
// pid = the locality, tid = the worker (the workers' count: other threads); ts and dur in µs.
//   tasks           "X" "task" (cat "task"), args.end = "completed" or "suspended" (the task
//                   continues in a later slice, perhaps on another worker)
//   parcels         "i" "parcel sent" / "parcel received" (cat "parcel"), args: peer, bytes,
//                   zero_copy_bytes, kind, control, request_id
//   RMA reads       "b"/"e" "rma read" (cat "rma", an async pair: reads overlap), args: peer,
//                   bytes
//   metadata        "M" process_name, process_sort_index, thread_name
// otherData: locality, workers, events, dropped_events, event_limit, clock, stamps ("tsc" or
// "steady_clock": what the recorder read; the file holds CLOCK_MONOTONIC either way).
#include "trace.hpp"
#include <courier/common/single_writer.hpp>

#include "locality_state.hpp"
#include "scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/mman.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace courier::detail::trace {

std::atomic<recorder*> g_active{nullptr};
bool g_tsc = false;

namespace {
/// The TSC is a clock here: invariant (CPUID), and the kernel's clocksource for
/// CLOCK_MONOTONIC (so it is synchronized across CPUs, as the kernel checked).
bool tsc_is_a_clock() {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0x80000007, &a, &b, &c, &d) == 0 || (d & (1u << 8)) == 0) {
        return false;
    }
    std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string source;
    return in >> source && source == "tsc";
#else
    return false;
#endif
}
} // namespace

std::uint64_t now_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
}

std::string file_for_locality(std::string const& path, std::uint32_t locality) {
    std::filesystem::path p(path);
    std::string stem = p.stem().string();
    std::string ext = p.extension().string(); // ".json"; empty for "trace" and ".hidden"
    std::filesystem::path name = stem + "." + std::to_string(locality) + ext;
    return (p.parent_path() / name).string();
}

// ---- buffer -------------------------------------------------------------------------------

namespace {
// Blocks grow from 4096 events (192 KiB) to 65536 (3 MiB): a short trace costs little
// memory, a long one few allocations.
constexpr std::int64_t first_block_events = 4096;
constexpr std::int64_t max_block_events = 65536;
} // namespace

void buffer::unmap::operator()(event* p) const noexcept {
    ::munmap(p, bytes);
}

bool buffer::push(event const& e, std::atomic<std::int64_t>& budget) {
    if (blocks_.empty() || used_ == blocks_.back().capacity) [[unlikely]] {
        // Reserve the next block's events from the locality's budget (a smaller last one).
        std::int64_t left = budget.load(std::memory_order_relaxed);
        std::int64_t take = 0;
        do {
            std::int64_t want =
                blocks_.empty()
                    ? first_block_events
                    : std::min<std::int64_t>(2 * static_cast<std::int64_t>(blocks_.back().capacity),
                                             max_block_events);
            take = std::min(left, want);
            if (take <= 0) {
                add_single_writer(dropped_);
                return false;
            }
        } while (!budget.compare_exchange_weak(left, left - take, std::memory_order_relaxed));
        std::size_t const bytes = static_cast<std::size_t>(take) * sizeof(event);
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED) {
            budget.fetch_add(take, std::memory_order_relaxed);
            add_single_writer(dropped_);
            return false;
        }
        block b{std::unique_ptr<event[], unmap>(static_cast<event*>(p), unmap{bytes}),
                static_cast<std::size_t>(take)};
        try {
            blocks_.push_back(std::move(b));
        } catch (std::bad_alloc const&) { // `b` unmaps its memory
            budget.fetch_add(take, std::memory_order_relaxed);
            add_single_writer(dropped_);
            return false;
        }
        used_ = 0;
    }
    blocks_.back().events[used_++] = e;
    add_single_writer(kept_);
    return true;
}

// ---- recorder -----------------------------------------------------------------------------

recorder::recorder(scheduler const& s, std::uint64_t max_events)
    : stamp0_((g_tsc = tsc_is_a_clock(), stamp())), ns0_(now_ns()), sched_(s), limit_(max_events),
      budget_(static_cast<std::int64_t>(std::min<std::uint64_t>(max_events, INT64_MAX))) {
    for (std::size_t i = 0; i < s.options().threads; ++i) {
        workers_.push_back(std::make_unique<buffer>());
    }
}

double recorder::ns_per_tick() const noexcept {
    if (!g_tsc) {
        return 1.0;
    }
    std::uint64_t ticks = stamp() - stamp0_, ns = now_ns() - ns0_;
    return ticks > 0 && ns > 0 ? static_cast<double>(ns) / static_cast<double>(ticks) : 1.0;
}

std::uint64_t recorder::to_ns(std::uint64_t s, double ns_per_tick) const noexcept {
    if (!g_tsc) {
        return s;
    }
    double d = (static_cast<double>(s) - static_cast<double>(stamp0_)) * ns_per_tick;
    return static_cast<std::uint64_t>(static_cast<double>(ns0_) + d);
}

void recorder::task(worker& w, std::uint64_t begin, std::uint64_t end, bool completed) noexcept {
    event e;
    e.begin = begin;
    e.end = end;
    e.kind = event_kind::task;
    e.flag = completed;
    if (&w.sched == &sched_ && w.index < workers_.size()) {
        workers_[w.index]->push(e, budget_);
    }
}

void recorder::record(event const& e) noexcept {
    worker* w = current_worker();
    if (w != nullptr && &w->sched == &sched_ && w->index < workers_.size()) {
        workers_[w->index]->push(e, budget_); // this thread is that buffer's only writer
        return;
    }
    std::lock_guard g(others_mutex_);
    others_.push(e, budget_);
}

void recorder::parcel(bool sent, std::uint32_t peer, serialization::message const& m,
                      std::uint64_t total, std::uint64_t zero_copy) noexcept {
    event e;
    e.begin = e.end = stamp();
    e.kind = sent ? event_kind::parcel_sent : event_kind::parcel_received;
    e.peer = peer;
    e.bytes = total;
    e.zero_copy = zero_copy;
    // The fields after the kind byte (locality_state.hpp): requests {action, request id},
    // ordered requests {sequence number, action, request id}, replies {request id, control}.
    auto d = m.data();
    std::size_t const at = serialization::message_header_size;
    auto u64_at = [&](std::size_t off, std::uint64_t& v) {
        if (d.size() < at + off + sizeof v) {
            return false;
        }
        std::memcpy(&v, d.data() + at + off, sizeof v);
        return true;
    };
    if (d.size() > at) {
        e.parcel_kind = std::to_integer<std::uint8_t>(d[at]);
        std::uint64_t action = 0;
        if (e.parcel_kind == request && u64_at(1, action) && u64_at(9, e.request_id)) {
            e.flag = is_control(action);
        } else if (e.parcel_kind == ordered_request && u64_at(9, action) &&
                   u64_at(17, e.request_id)) {
            e.flag = is_control(action);
        } else if (e.parcel_kind == reply && u64_at(1, e.request_id) && d.size() > at + 9) {
            e.flag = std::to_integer<std::uint8_t>(d[at + 9]) != 0;
        } else if (e.parcel_kind == reply_lost) {
            u64_at(1, e.request_id); // the request's short id (send_undo::short_request_id)
            e.flag = true;
        } else if (e.parcel_kind == heartbeat || e.parcel_kind == goodbye ||
                   e.parcel_kind == credit) {
            e.flag = true;
        }
    }
    record(e);
}

void recorder::rma_read(std::uint32_t peer, std::uint64_t bytes,
                        std::chrono::steady_clock::time_point begin) noexcept {
    // The transport's time of the first post, as a stamp: back from now by the time passed.
    auto const ago = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - begin)
                         .count();
    event e;
    e.end = stamp();
    e.begin =
        e.end - std::min<std::uint64_t>(
                    e.end, static_cast<std::uint64_t>(
                               static_cast<double>(std::max<long long>(ago, 0)) / ns_per_tick()));
    e.kind = event_kind::rma_read;
    e.peer = peer;
    e.bytes = bytes;
    record(e);
}

/// The sum of `count` over every buffer (counts are atomics: no lock).
std::uint64_t recorder::total(std::uint64_t (buffer::*count)() const noexcept) const {
    std::uint64_t n = (others_.*count)();
    for (auto const& b : workers_) {
        n += ((*b).*count)();
    }
    return n;
}

std::uint64_t recorder::events() const {
    return total(&buffer::size);
}

std::uint64_t recorder::dropped() const {
    return total(&buffer::dropped);
}

// ---- the file -----------------------------------------------------------------------------

namespace {

char const* parcel_kind_name(std::uint8_t k) {
    switch (k) {
    case request:
        return "request";
    case reply:
        return "reply";
    case heartbeat:
        return "heartbeat";
    case goodbye:
        return "goodbye";
    case credit:
        return "credit";
    case ordered_request:
        return "ordered_request";
    case ordered_skip:
        return "ordered_skip";
    case reply_lost:
        return "reply_lost";
    default:
        return "unknown";
    }
}

/// Nanoseconds as microseconds with three decimals (exact).
struct micros {
    std::uint64_t ns;
};

} // namespace
} // namespace courier::detail::trace

template <>
struct fmt::formatter<courier::detail::trace::micros> : fmt::formatter<std::string_view> {
    auto format(courier::detail::trace::micros m, format_context& ctx) const {
        return fmt::format_to(ctx.out(), "{}.{:03}", m.ns / 1000, m.ns % 1000);
    }
};

namespace courier::detail::trace {

namespace {

/// Appends events to a FILE* through a buffer; remembers the first write error.
class json_writer {
public:
    explicit json_writer(std::FILE* f) : f_(f) {}
    template <class... Args>
    void event(fmt::format_string<Args...> format, Args&&... args) {
        if (!first_) {
            buf_.append(std::string_view(",\n"));
        }
        first_ = false;
        fmt::format_to(std::back_inserter(buf_), format, std::forward<Args>(args)...);
        if (buf_.size() > (1u << 20)) {
            flush();
        }
    }
    void raw(std::string_view s) {
        buf_.append(s);
        flush();
    }
    void flush() {
        if (ok_ && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
            ok_ = false;
        }
        buf_.clear();
    }
    bool ok() const noexcept { return ok_; }

private:
    std::FILE* f_;
    fmt::memory_buffer buf_;
    bool first_ = true;
    bool ok_ = true;
};

/// `ns` maps a stamp to CLOCK_MONOTONIC nanoseconds.
template <class ToNs>
void write_events(json_writer& out, buffer const& b, std::uint32_t pid, std::size_t tid,
                  std::uint64_t& async_id, ToNs const& ns) {
    b.for_each([&](event const& e) {
        std::uint64_t const begin = ns(e.begin);
        std::uint64_t const end = std::max(begin, ns(e.end));
        switch (e.kind) {
        case event_kind::task:
            out.event(R"({{"name":"task","cat":"task","ph":"X","pid":{},"tid":{},"ts":{},)"
                      R"("dur":{},"args":{{"end":"{}"}}}})",
                      pid, tid, micros{begin}, micros{end - begin},
                      e.flag ? "completed" : "suspended");
            break;
        case event_kind::parcel_sent:
        case event_kind::parcel_received:
            out.event(R"({{"name":"{}","cat":"parcel","ph":"i","s":"t","pid":{},"tid":{},)"
                      R"("ts":{},"args":{{"peer":{},"bytes":{},"zero_copy_bytes":{},)"
                      R"("kind":"{}","control":{},"request_id":"{:#x}"}}}})",
                      e.kind == event_kind::parcel_sent ? "parcel sent" : "parcel received", pid,
                      tid, micros{begin}, e.peer, e.bytes, e.zero_copy,
                      parcel_kind_name(e.parcel_kind), e.flag, e.request_id);
            break;
        case event_kind::rma_read: {
            std::uint64_t id = async_id++;
            out.event(R"({{"name":"rma read","cat":"rma","ph":"b","id":{},"pid":{},"tid":{},)"
                      R"("ts":{},"args":{{"peer":{},"bytes":{}}}}})",
                      id, pid, tid, micros{begin}, e.peer, e.bytes);
            out.event(R"({{"name":"rma read","cat":"rma","ph":"e","id":{},"pid":{},"tid":{},)"
                      R"("ts":{}}})",
                      id, pid, tid, micros{end});
            break;
        }
        }
    });
}

} // namespace

bool recorder::write(std::string const& path, std::uint32_t locality) const {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
        return false;
    }
    json_writer out(f);
    out.raw("{\"traceEvents\":[\n");
    std::uint32_t const pid = locality;
    out.event(
        R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"locality {}"}}}})",
        pid, locality);
    out.event(
        R"({{"name":"process_sort_index","ph":"M","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
        pid, locality);
    for (std::size_t w = 0; w <= workers_.size(); ++w) {
        out.event(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
                  pid, w,
                  w < workers_.size() ? fmt::format("worker {}", w) : std::string("other threads"));
    }
    std::uint64_t async_id = std::uint64_t{locality} << 40; // unique across the job's files
    double const scale = ns_per_tick();
    auto ns = [&](std::uint64_t s) { return to_ns(s, scale); };
    for (std::size_t w = 0; w < workers_.size(); ++w) {
        write_events(out, *workers_[w], pid, w, async_id, ns);
    }
    {
        std::lock_guard g(others_mutex_);
        write_events(out, others_, pid, workers_.size(), async_id, ns);
    }
    out.raw(fmt::format("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"locality\":{},"
                        "\"workers\":{},\"events\":{},\"dropped_events\":{},\"event_limit\":{},"
                        "\"clock\":\"CLOCK_MONOTONIC\",\"stamps\":\"{}\"}}}}\n",
                        locality, workers_.size(), events(), dropped(), limit_,
                        g_tsc ? "tsc" : "steady_clock"));
    bool ok = out.ok();
    int saved = errno;
    if (std::fclose(f) != 0) {
        ok = false;
        saved = errno;
    }
    errno = saved;
    return ok;
}

} // namespace courier::detail::trace
