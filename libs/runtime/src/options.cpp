// SPDX-License-Identifier: BSL-1.0
#include "options.hpp"

#include <courier/parcelport/transport.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <utility>

namespace courier::detail {

std::vector<option_spec> const& option_table() {
    static std::vector<option_spec> const table = {
        {"threads", "cores",
         "worker OS threads; 'cores' = the cores available to this process, shared out among "
         "the localities courier-run starts on this machine"},
        {"stack_size", "65536",
         "bytes of stack per Courier thread (rounded up to pages; plus a guard page)"},
        {"bind", "auto",
         "'cores': pin worker i to core i with hwloc (under courier-run, locality r's workers "
         "start after those of localities 0..r-1); 'none': no pinning; 'auto': 'cores' unless "
         "the localities on this machine have more workers than it has cores, then 'none'"},
        {"idle_spin_us", "50", "microseconds an idle worker keeps polling before it sleeps"},
        {"collective_spin_us", "1000",
         "microseconds a task waiting in a collective keeps polling (yielding to the worker's "
         "other tasks, and the core when the host is oversubscribed) before it sleeps"},
        {"log", "warn", "log level: error, warn, info or debug"},
        {"zero_copy_threshold", "auto",
         "bytes at which a bitwise block is sent zero copy (pointer chunk); 0 = zero copy off; "
         "auto = 65536 on tcp over libfabric's net (the smallest block pushed whole into the "
         "receiver's posted buffer; with --courier:push_max under 98304, 98304), 98304 over "
         "tcp;ofi_rxm (an RMA read costs a round trip there), 8192 on shm, else 4096; "
         "across hosts (provider auto) each rail's: shm's for this host's localities"},
        {"deep_array_threshold", "0",
         "bytes at which a deep-copy array() travels as its own chunk (an RMA read) rather "
         "than packed; 0 = the zero-copy threshold"},
        {"parcelport", "libfabric",
         "the transport between localities: 'libfabric' (providers below) or 'mpi' (MPI "
         "point-to-point calls; the program must run under mpirun or srun, which the MPI "
         "library then bootstraps from, not under courier-run)"},
        {"mpi_threads", "serialized",
         "mpi: 'serialized' = one thread at a time calls MPI (MPI_THREAD_SERIALIZED, the "
         "transport's lock); 'multiple' = senders call MPI_Isend concurrently "
         "(MPI_THREAD_MULTIPLE)"},
        {"provider", "auto",
         "libfabric provider between localities: 'auto' = shm between the localities of one "
         "host, the network provider between hosts (verbs, efa or cxi where libfabric offers "
         "them, else tcp); 'tcp' (libfabric's net provider where offered, else tcp;ofi_rxm), "
         "'shm' or another provider forces one for all"},
        {"interface", "auto",
         "network interface for tcp between hosts; 'auto' = the one that routes to the "
         "launcher (courier-run) or the default route's, never loopback when peers are on other "
         "hosts; while every locality runs on one host tcp uses loopback"},
        {"eager_threshold", "auto",
         "bytes of index data sent inline in the eager message; more is read by RMA; auto = "
         "98304 on tcp, 8192 on shm, else 4096"},
        {"read_budget", "0",
         "bytes of rendezvous (RMA read) data a locality receives at a time (on shm also per "
         "progress pass); more waits. Small keeps the landing buffers in cache; 0 = the "
         "provider's default (shm 512 KiB, tcp 4 MiB, mpi 64 MiB, else 16 MiB)"},
        {"read_piece", "0",
         "largest single RMA read in bytes (>= 4096); larger chunks are read in pieces posted "
         "together (mpi: one MPI message each, posted as the one before completes); 0 = the "
         "provider's default (shm 1 GiB, tcp 1 MiB, mpi 8 MiB, else 1 MiB)"},
        {"push_max", "auto",
         "tcp (libfabric's net) within one host, or between hosts with "
         "--courier:network_doorbell=0: a parcel of up to this many bytes of zero-copy data (at "
         "most 3 chunks; at most 4 MiB) is sent whole into receives the receiver keeps posted, "
         "instead of read by the receiver; 0 = always read; auto = 262144 on net, else 0"},
        {"max_parcel_size", "0",
         "bytes of zero-copy data one parcel from a peer may bring; a larger one is not received "
         "(as one this locality has no memory for): the call fails with an error saying so, "
         "and its sender is not held up; 0 = no limit but this machine's memory"},
        {"coalesce", "1",
         "1 = parcels a worker sends to a locality while two messages to it are in flight are "
         "coalesced into one message, sent at the next progress pass (a lone parcel or a "
         "request/reply leaves at once); 0 = every parcel is its own message"},
        {"coalesce_records", "0",
         "a coalesced message leaves as soon as it holds this many parcels, so that the "
         "receiver runs them while a sender's loop goes on; 0 = auto: on shm 16, or 8 of "
         "them with a completion (rendezvous announcements, sends waited for); on tcp 16 "
         "parcels once they hold 16 KiB (each message is a system call); the MPI parcelport: "
         "16 when every peer is on this host, else only its bytes bound it"},
        {"coalesce_in_flight", "0",
         "a parcel waits for a coalesced message while this many messages to its destination "
         "are in flight (sent, completion not yet seen); 0 = auto: 1 on tcp (a lone request "
         "or reply finds none in flight there) and on the MPI parcelport, 2 on shm and the other "
         "libfabric providers"},
        {"batch_tasks", "1",
         "1 = the small requests of a received coalesced message run one after another as one "
         "task (one allocation and task per message, not per parcel; the rest is queued for "
         "other workers when one is idle or a request blocks); 0 = a task per parcel"},
        {"shm_doorbell", "1",
         "shm: 1 = peers wake an idle locality's sleeping workers at once (a shared word and a "
         "datagram socket); 0 = idle workers sleep in a bounded backoff (up to 1 ms late)"},
        {"shm_split", "1",
         "shm: 1 = a message of a little over 4 KiB (shm's inject size) goes as two parts "
         "within it, which the receiver joins (whole, it takes shm's slower CMA protocol: a "
         "4 KiB call measured 4.2 us whole, 2.6 us split); 0 = every message goes whole"},
        {"shm_outbox", "8388608",
         "shm: bytes of the shared-memory outbox (/dev/shm/courier-JOB-RANK-outbox) in which "
         "a sender stages the chunks of rendezvous parcels, which the receiver then copies out "
         "instead of reading them with shm's CMA protocol (a system call that pins the "
         "sender's pages: 2.8 us for 16 KiB against 0.45 us for a copy); 0 = no outbox"},
        {"shm_outbox_chunk", "auto",
         "shm: the largest chunk staged in the outbox; larger ones are read with CMA; auto = "
         "1 MiB on AMD processors, 32 KiB on others (where a CMA read costs less than a second "
         "copy); 0 = none (as shm_outbox=0)"},
        {"shm_outbox_idle", "auto",
         "shm: 1 = the chunks of a call to an idle locality (none of its parcels in flight) "
         "are staged in the outbox too; 0 = they are read from the caller's memory (one copy "
         "of lines no one wrote, against two of lines the other core holds: a 16 KiB call 1.3x "
         "faster on an Intel Xeon); auto = 1 on AMD processors, 0 on others. Chunks to a "
         "busy locality (a stream) are staged either way"},
        {"shm_rings", "1",
         "shm: 1 = eager messages of up to 16 KiB (small parcels, coalesced messages) between "
         "localities of one host go through per-pair rings in shared memory "
         "(/dev/shm/courier-JOB-RANK-rings, 256 KiB per pair and direction) whenever the ring "
         "has room, instead of through shm's own queues; 0 = all through shm"},
        {"shm_direct_read", "1",
         "shm: 1 = the receiver reads a chunk that is not in an outbox from the sender's memory "
         "itself (process_vm_readv); 0 = with fi_read, by which libfabric 1.17's shm holds the "
         "sender's region lock for the whole copy, stalling the sender's own progress (large "
         "transfers in both directions then take turns)"},
        {"shm_collectives", "1",
         "1 = the small messages of collectives (up to ~1 KiB) between localities of one host "
         "go through per-pair rings in shared memory (/dev/shm/courier-JOB-RANK-coll, 8 KiB "
         "per pair; jobs of up to 64 localities), not as parcels; 0 = every message is a "
         "parcel"},
        {"tcp_doorbell", "auto",
         "tcp: 1 = peers on this host wake an idle locality by the same doorbell, and the "
         "completion queue has no wait fd; 0 = idle workers wait on the completion queue's fd "
         "(on net level with the doorbell; on tcp;ofi_rxm its signals cost ~1.3 us per "
         "message); auto = 1 with one worker, else 0"},
        {"network_doorbell", "1",
         "between hosts: 1 = the network rail's completion queue has no wait fd (its signals "
         "cost ~1.4 us of every one-way trip on tcp); an idle locality sleeps on a datagram "
         "socket of the network interface, which a peer rings when it sends after 250 us of "
         "silence towards it; 0 = idle workers wait on the completion queue's fd"},
        {"network_quiet_poll_us", "auto",
         "jobs across hosts with several localities per host: while the network rail is quiet "
         "(nothing sent or received for 2 ms, no rendezvous under way) it reads its "
         "completion queue (on tcp an epoll_wait) once per this many microseconds instead of "
         "on every progress pass, which the same host's traffic makes; auto = 20 times what "
         "such a read costs (2 - 100 us); 0 = every pass"},
        {"tcp_send_queue", "16",
         "tcp;ofi_rxm (tcp without net: with the wait fd, or no net provider): messages one "
         "connection takes "
         "at a time (rxm copies each into a 16 KiB buffer it holds until the kernel took it); "
         "more wait in Courier's queue, where small parcels coalesce; 0 = rxm's default (128, "
         "FI_OFI_RXM_MSG_TX_SIZE, which wins if set)"},
        {"tcp_receive_buffers", "256",
         "tcp;ofi_rxm: 16 KiB receive buffers posted for all peers together; 0 = rxm's default "
         "(4096, 64 MiB; FI_OFI_RXM_MSG_RX_SIZE, which wins if set)"},
        {"peer_timeout", "5",
         "seconds of silence after which a locality is declared failed by every peer (killed, "
         "stopped, unreachable); calls to it then fail with network_error; also how long "
         "courier-run lets the others run after one failed; 0 = no liveness checks"},
        {"on_peer_failure", "exit",
         "'exit': when a locality fails, every other ends with status 1 after "
         "peer_timeout/2 seconds (its futures on the failed one fail at once), as an MPI job "
         "ends; 'continue': the program handles the network_error and goes on"},
        {"parcels_in_flight", "1024",
         "flow control: requests (async, post) a locality may have in flight to one other, "
         "sent and not yet started there; more suspend the sending Courier thread until the "
         "destination starts some (at most 4194304); 0 = no flow control (unbounded queues on "
         "both sides)"},
        {"bytes_in_flight", "8388608",
         "flow control: bytes of requests in flight to one locality (a larger request goes "
         "while less than half of this is in use, or while no other is in flight, or one on "
         "libfabric; at most 256 GiB, and a request counts as at most 64 GiB); 0 = no flow "
         "control"},
        {"total_parcels_in_flight", "65536",
         "flow control: requests in flight from (and admitted to) one locality in all; each "
         "pair's window is at most this divided among the other localities (at least 16); "
         "0 = no total"},
        {"total_bytes_in_flight", "134217728",
         "flow control: bytes of requests in flight from (and admitted to) one locality in "
         "all, divided among the others like total_parcels_in_flight (at least 64 KiB); "
         "0 = no total"},
        {"rma_pool_block", "4194304",
         "bytes per registered block of the rma pool (a power of two, 64 KiB .. 1 GiB)"},
        {"rma_pool_limit", "0",
         "bytes of registered memory the rma pool may hold; over it allocation fails with "
         "rma::pool_exhausted; 0 = half of the machine's memory"},
        {"rma_pool_shared", "1",
         "shm: 1 = the rma pool's memory is a segment that localities on this host map, so a "
         "receiver copies an rma chunk (rma_vector, rma_object) out of it instead of reading it "
         "with process_vm_readv (a fork() child's rma memory of before the fork reads zeros). "
         "0 = private memory"},
        {"rma_numa", "local",
         "'local': rma pool memory on the NUMA node of the allocating worker; 'none'"},
        {"registration_cache", "1024",
         "registrations of on-the-fly memory (pointer chunks) kept for reuse; 0 = none"},
        {"posted_errors", "fail",
         "an exception escaping a posted action or task (post) is logged, naming the locality "
         "and the action (at most 10 such lines in 10 s; their count at the end); 'fail': this "
         "locality's exit status is then 1, so the job fails; 'log': it is only logged"},
        {"print_counters", "0",
         "1: at shutdown every locality prints its performance counters to stdout, one "
         "'locality#R NAME VALUE' line each, sorted by name (courier::get_counters)"},
        {"trace", "",
         "PATH: every locality records its tasks, parcels and RMA reads and writes them at "
         "shutdown as Chrome trace-event JSON (Perfetto, chrome://tracing) to PATH with its "
         "number before the extension: trace.json gives trace.0.json, trace.1.json, ...; "
         "empty = no trace"},
        {"trace_events", "1048576",
         "events a locality's trace keeps at most; later ones are dropped and counted in the "
         "file's otherData.dropped_events"},
        {"malloc_retain", "1",
         "1 = freed heap memory stays with the process for reuse (glibc: trim threshold 256 "
         "MiB, mmap threshold 32 MiB), so that it need not be faulted in again; with "
         "glibc's defaults a free at the top of a thread's heap hands the pages back and the "
         "next allocation faults them in again (a 64 KiB all_gather of an lvalue: 48 us against "
         "11 us); MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ or their GLIBC_TUNABLES win; "
         "0 = glibc's defaults"},
        {"spmd", "0", "1: run courier_main on every locality (each calls finalize)"},
        {"help", "0", "print this list and exit"},
    };
    return table;
}

std::string const& config::get(std::string_view name) const {
    auto it = values.find(name);
    if (it == values.end()) {
        throw config_error(fmt::format("internal: option '{}' is not in the table", name));
    }
    return it->second;
}

namespace {
/// The bytes a size's suffix stands for (none: 1; K, M, G, or KiB, MiB, GiB in either case);
/// 0 for any other suffix.
long long unit_of(std::string_view suffix) noexcept {
    auto is = [&](std::string_view want) {
        return suffix.size() == want.size() &&
               std::equal(suffix.begin(), suffix.end(), want.begin(), [](char c, char w) {
                   return std::toupper(static_cast<unsigned char>(c)) == w;
               });
    };
    for (auto [letter, bytes] : {std::pair{'K', 1LL << 10}, {'M', 1LL << 20}, {'G', 1LL << 30}}) {
        char const full[] = {letter, 'I', 'B'};
        if (is(std::string_view(&letter, 1)) || is(std::string_view(full, 3))) {
            return bytes;
        }
    }
    return suffix.empty() ? 1 : 0;
}

/// Option `name`'s value `s`: an integer, times the unit of its suffix if `sizes` (else no
/// suffix is allowed), within [min, max]; throws config_error naming the option otherwise.
long long integer_option(std::string_view name, std::string const& s, long long min, long long max,
                         bool sizes) {
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    std::string_view suffix(p, static_cast<std::size_t>(s.data() + s.size() - p));
    long long const unit = ec == std::errc() && (sizes || suffix.empty()) ? unit_of(suffix) : 0;
    if (unit == 0) {
        throw config_error(fmt::format("--courier:{}={}: {}", name, s,
                                       sizes ? "not a size (bytes: an integer, optionally "
                                               "followed by K, M or G)"
                                             : "not an integer"));
    }
    // A multiple that does not fit in a long long is out of range as well.
    bool const fits = v <= std::numeric_limits<long long>::max() / unit &&
                      v >= std::numeric_limits<long long>::min() / unit;
    if (!fits || v * unit < min || v * unit > max) {
        throw config_error(
            fmt::format("--courier:{}={}: out of range [{}, {}]", name, s, min, max));
    }
    return v * unit;
}
} // namespace

long long config::get_int(std::string_view name, long long min, long long max) const {
    return integer_option(name, get(name), min, max, false);
}

long long config::get_bytes(std::string_view name, long long min, long long max) const {
    return integer_option(name, get(name), min, max, true);
}

long long config::get_threshold(std::string_view name, long long min, long long max,
                                std::string_view provider) const {
    if (get(name) != "auto") {
        return get_bytes(name, min, max);
    }
    return static_cast<long long>(parcelport::default_eager_threshold(provider));
}

std::string const& config::get_choice(std::string_view name,
                                      std::initializer_list<std::string_view> choices) const {
    std::string const& v = get(name);
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) {
        return v;
    }
    std::string expected;
    for (auto it = choices.begin(); it != choices.end(); ++it) {
        expected += it == choices.begin() ? "" : std::next(it) == choices.end() ? " or " : ", ";
        expected += *it;
    }
    throw config_error(fmt::format("--courier:{}={}: expected {}", name, v, expected));
}

namespace {
std::string env_name(std::string_view name) {
    std::string e = "COURIER_";
    for (char c : name) {
        e += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    return e;
}
option_spec const* find_spec(std::string_view name) {
    for (auto const& s : option_table()) {
        if (s.name == name) {
            return &s;
        }
    }
    return nullptr;
}
} // namespace

config parse_config(int argc, char** argv) {
    config c;
    std::map<std::string, std::string, std::less<>> given;
    for (int i = 0; i < argc; ++i) {
        std::string_view a = argv[i] != nullptr ? argv[i] : "";
        constexpr std::string_view prefix = "--courier:";
        if (i == 0 || a.substr(0, prefix.size()) != prefix) {
            c.rest.push_back(argv[i]);
            continue;
        }
        auto body = a.substr(prefix.size());
        auto eq = body.find('=');
        std::string name(body.substr(0, eq));
        std::string value = eq == std::string_view::npos ? "1" : std::string(body.substr(eq + 1));
        if (find_spec(name) == nullptr) {
            throw config_error(fmt::format("unknown option --courier:{} (--courier:help lists "
                                           "the options)",
                                           name));
        }
        given[name] = value;
    }
    c.rest.push_back(nullptr);
    for (auto const& s : option_table()) {
        std::string v(s.default_value);
        if (char const* e = std::getenv(env_name(s.name).c_str()); e != nullptr) {
            v = e;
        }
        if (auto it = given.find(s.name); it != given.end()) {
            v = it->second;
        }
        c.values.emplace(std::string(s.name), v);
    }
    c.help = c.get("help") != "0";
    return c;
}

std::string help_text() {
    std::string out = "Courier runtime options (--courier:NAME=VALUE, or environment "
                      "COURIER_NAME=VALUE; sizes in bytes take K, M or G: 64K, 1M):\n";
    for (auto const& s : option_table()) {
        out +=
            fmt::format("  --courier:{:<22} default {:<8} {}\n", s.name, s.default_value, s.help);
    }
    return out;
}

} // namespace courier::detail
