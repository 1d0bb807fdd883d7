// SPDX-License-Identifier: BSL-1.0
// courier::parcelport::transport: the one interface between the runtime and a network. The
// runtime depends on this header alone; it never names a provider. Implementations: libfabric
// (make_libfabric_transport, below), a router over one libfabric endpoint per provider (shm
// within a host, the network between hosts: make_transport with provider "auto"), and the
// in-process loopback for tests (loopback.hpp).
//
// Messages. send() takes a serialization::message: an index buffer plus chunks in stream
// order; pointer and rma chunks reference memory the caller owns. The transport may keep the
// message object (what it keeps alive) until `on_sent` has run, or leave it to the caller when
// it copied everything it needs before send() returned (a libfabric eager message); a caller
// must not use it after the call either way. The memory that pointer and rma chunks reference must
// stay valid and unchanged until then: the receiver may read it in place (zero copy), so a
// transport copies it only when it says so (the loopback does). A received message owns all
// its bytes; the receive handler takes it by rvalue and may keep it as long as it likes.
//
// Completion. `on_sent(ec)` runs exactly once per accepted send, from progress() on whichever
// thread calls it: with an empty ec once the receiver holds every byte (the caller's memory may
// then be reused), with an error when the message cannot be delivered (peer gone, connection
// reset). send() itself throws, and then never calls on_sent, when the message is refused
// outright: std::out_of_range for an unknown destination, std::length_error for a message the
// protocol cannot describe, network_error for a provider error. send_counted() takes no
// on_sent: its end goes to the counted handler (set_counted_handler, a set-up call), with
// `sends` = 1, or with the number of such sends a batch carried when the batch completes; it
// runs where on_sent would (from progress(), or within a send whose full batch's post was
// refused), and never for a send that threw. A counted send that fails (its batch or message
// refused for good, a connection lost) first reaches the counted failure handler, with the tag
// its caller gave it (set_counted_failure_handler): a count alone does not say what to give back.
//
// Threads. send() and send_coalesced() may be called concurrently from any threads.
// progress() may be called from any thread, concurrently: one caller at a time does the work,
// the others return false at once. The receive handler and every on_sent run inside progress(),
// so they must not block; they may call send(). set_peers(), set_receive_handler() and
// set_job_token() are set-up calls, made once, before the first send() or progress().
// Nothing is ordered: two messages to one destination may be delivered in either order.
//
// Errors. Provider errors become courier::network_error (error.hpp) with the provider's words,
// converted where the transport calls the provider. Malformed or foreign messages received
// (bad header, wrong job token, inconsistent sizes) are dropped with one log line each and never
// reach the handler.
#pragma once

#include <courier/parcelport/error.hpp>
#include <courier/parcelport/wait_coverage.hpp>
#include <courier/serialization/message.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace courier::parcelport {

/// What a transport has done since it was opened. Counters only grow; a snapshot is consistent
/// per field, not across fields.
struct statistics {
    std::uint64_t messages_sent = 0;
    std::uint64_t messages_received = 0;
    std::uint64_t eager_bytes_sent = 0; ///< header + descriptors + inline index data
    std::uint64_t rma_bytes_read = 0;   ///< bytes this side pulled with RMA reads
    std::uint64_t rma_reads = 0;        ///< RMA reads posted (a chunk may take several pieces)
    /// The most bytes of one parcel's RMA reads posted and not completed at once: the read
    /// budget, or one piece if that is larger.
    std::uint64_t rma_read_bytes_in_flight_max = 0;
    /// Parcels whose reads outlived transport_options::read_stall_timeout (their read budget
    /// was returned).
    std::uint64_t stalled_reads = 0;
    /// RMA reads the provider failed that were posted again (rendezvous::max_read_retries).
    std::uint64_t read_retries = 0;
    std::uint64_t rendezvous_sends = 0; ///< sends that needed RMA reads by the receiver
    /// Memory registrations performed for sends and receives (the rma pool's registrations
    /// of its own blocks are in rma::get_pool_statistics()).
    std::uint64_t registrations = 0;
    std::uint64_t eagain_retries = 0; ///< operations the provider deferred (back-pressure)
    /// Coalesced messages sent (send_coalesced; on tcp also those that carried DONEs alone),
    /// and the parcels they carried.
    std::uint64_t batches_sent = 0;
    std::uint64_t parcels_in_batches = 0;
    /// Of those parcels, the ones that found nothing held for their destination and left at
    /// once as a batch of their own (a small parcel's cheapest send: a batch's post).
    std::uint64_t lone_batches = 0;
    /// Index bytes copied into eager messages (pointer-chunk payload never is).
    std::uint64_t bytes_copied_on_send = 0;
    std::uint64_t receive_buffers_reused = 0; ///< RMA destinations taken from the buffer pool
    std::uint64_t deferred_rendezvous = 0;    ///< parcels that waited for the read budget
    /// Parcels delivered with their chunks refused (transport_options::max_parcel_bytes, or no
    /// memory to land them).
    std::uint64_t refused_parcels = 0;
    /// External chunks sent with the rma pool's registration (nothing registered on send).
    std::uint64_t pool_chunks_sent = 0;
    /// External chunks whose registration came from the registration cache / needed one.
    std::uint64_t registration_cache_hits = 0;
    std::uint64_t registration_cache_misses = 0;
    /// rma chunks read into rma pool memory (a received rma_vector adopts it).
    std::uint64_t pool_receive_buffers = 0;
    /// Doorbells this side rang: a peer it sent to was about to sleep.
    std::uint64_t doorbell_rings = 0;
    /// shm: messages sent and received through the message rings (parcels and announcements,
    /// counted in messages_sent too; a coalesced message counts once here; DONEs), and sends a
    /// ring refused (full, or written by another thread) that went through the provider.
    std::uint64_t ring_messages_sent = 0;
    std::uint64_t ring_messages_received = 0;
    std::uint64_t ring_refusals = 0;
    /// Of the lone batches, those written straight into a message ring, with no batch buffer
    /// and no copy of it (a request or reply alone: the common case of a round trip on shm).
    std::uint64_t ring_lone_writes = 0;
    /// Messages sent as two parts, each within the provider's inject size.
    std::uint64_t split_sends = 0;
    /// shm: chunks staged in this side's outbox (copied there on send), and chunks and bytes
    /// copied out of a peer's outbox on receive (instead of an RMA read).
    std::uint64_t outbox_chunks_sent = 0;
    std::uint64_t outbox_chunks_received = 0;
    std::uint64_t outbox_bytes_received = 0;
    /// shm: RMA reads (of rma_reads) this side made itself with process_vm_readv rather than by
    /// fi_read (transport_options::shm_direct_read).
    std::uint64_t direct_reads = 0;
    /// shm: of the bytes read directly, those copied out of a peer's rma pool segment that
    /// this side maps (rma::share_with_host(); direct_read.hpp) rather than by the system call.
    std::uint64_t mapped_read_bytes = 0;
    /// DONE messages this side sent (a DONE message answers one or more rendezvous parcels);
    /// not the DONEs that rode in a coalesced message (tcp).
    std::uint64_t done_messages = 0;
    /// net: parcels sent and received whole as one tagged message (transport_options::push_max),
    /// instead of announced and read.
    std::uint64_t pushed_sends = 0;
    std::uint64_t pushed_receives = 0;
    /// Bytes of the pointer chunks of pushed parcels received.
    std::uint64_t pushed_bytes_received = 0;
    /// Progress passes that read the provider's completion queue (on tcp each runs the
    /// provider's progress: an epoll_wait); fewer than the passes while a paced rail is quiet
    /// (transport_options::quiet_poll_us).
    std::uint64_t completion_queue_reads = 0;
    /// Bytes of zero-copy (pointer and rma) chunks received: read by RMA, copied out of a
    /// peer's outbox, or landed in a pushed parcel's receive.
    std::uint64_t rendezvous_bytes_received() const noexcept {
        return rma_bytes_read + outbox_bytes_received + pushed_bytes_received;
    }
};

/// The read budget a provider gets by default: shm 512 KiB (its reads and outbox copies are
/// copies the receiving CPU makes within one progress pass, so more adds landing buffers, not
/// overlap: one-way and both ways 1.1-1.4x 1 MiB's rate at 64-512 KiB), tcp 4 MiB (with 1 MiB
/// pieces: 1.08-1.16x the rate of 2 MiB with 256 KiB pieces at 256 KiB - 4 MiB, posts
/// 1.03-1.16x at 128 KiB - 4 MiB, on an Intel Xeon), others 16 MiB (reads of several large
/// messages overlap on a network with a longer round trip). Figures: benchmarks/RESULTS.md.
std::size_t default_read_budget(std::string_view provider) noexcept;

/// The largest chunk a shm sender stages in its outbox by default: 1 MiB on AMD processors,
/// 32 KiB on others. On AMD EPYC a CMA read (a system call that pins the sender's pages) cost
/// several copies, and staging up to 1 MiB gave 1.2-1.4x the rate of reading; on an Intel Xeon
/// reading chunks of 64 KiB - 1 MiB was 1.1-1.2x faster than two copies one way, and both
/// ways too (benchmarks/RESULTS.md, "The middle sizes on Intel").
std::size_t default_shm_outbox_chunk() noexcept;

/// The largest single RMA read a provider gets by default; a larger chunk is read in pieces of
/// this size (libfabric: a read budget's worth in flight; mpi: each as the one before completes).
/// shm 1 GiB (one process_vm_readv per chunk), tcp 1 MiB (the sender's CPU answers each read by
/// writing it to its socket: fewer, larger writes, see default_read_budget), mpi 8 MiB (one MPI
/// message each: MPI copies it inside one call, which must stay short for heartbeats to pass),
/// others 1 MiB (pieces pipeline across a NIC's queues).
std::size_t default_read_piece(std::string_view provider) noexcept;

/// The eager threshold (and, but where parcels are pushed, the runtime's zero-copy threshold:
/// default_zero_copy_threshold) a provider gets by default
/// (the MPI parcelport is provider "mpi": 8 KiB, see make_mpi_transport): tcp 96 KiB (a rendezvous
/// costs a read request's round trip, more than copying up to 96 KiB: posts of 64 KiB ran
/// 1.43-1.47x as fast eager; and a third of a receive buffer, the most a coalesced message takes
/// of one parcel, then holds 32 KiB: posts of 32 KiB 1.2x; 128 KiB was slower for posts of 8 KiB
/// and of 128 KiB. The transport raises rxm's eager limit to match), shm 8 KiB (eager messages of
/// up to 8 KiB go as two parts within its 4 KiB inject size, see split_messages), others 4 KiB.
std::size_t default_eager_threshold(std::string_view provider) noexcept;

/// The runtime's zero-copy threshold a provider gets by default (its "auto"): the provider's
/// eager threshold, except where parcels are pushed (net, which "tcp" opens where libfabric
/// offers it, with `push_max`, transport_options::push_max, at least the eager threshold, so
/// that every block between them may be pushed): 64 KiB, the smallest chunk pushed. A block of
/// 64-96 KiB then goes from where it lies into the receiver's posted buffer, with no copy on either
/// side, instead of being copied into the eager message and out of the receive buffer
/// (osu_bw 1.06-1.15x, latency 0.78-0.90x, posts 1.08-1.12x at 64-88 KiB, under both cubic and BBR:
/// benchmarks/RESULTS.md, "Pushed parcels on net"). Over rxm, where such a chunk would be read (a
/// round trip), it stays the eager threshold.
std::size_t default_zero_copy_threshold(std::string_view provider, std::size_t push_max);

/// The largest pushed parcel (transport_options::push_max) a core provider gets by default:
/// net 256 KiB (from 96 KiB, tcp's eager threshold, to 256 KiB pushes cut the latency to
/// 0.55-0.70x the reads' with bandwidth level or better; at 512 KiB their bandwidth was
/// 0.74x the reads' in 9 of 9 paired rounds: benchmarks/RESULTS.md, "Pushed parcels on net"),
/// others 0 (they read).
std::size_t default_push_max(std::string_view core_provider) noexcept;

struct transport_options {
    /// Which transport make_transport() opens: "libfabric", or "mpi" (make_mpi_transport;
    /// every locality then runs under an MPI launcher, and `provider` is not used).
    std::string parcelport = "libfabric";
    /// mpi: MPI_THREAD_MULTIPLE (send() calls MPI_Isend on the caller's thread) instead of
    /// MPI_THREAD_SERIALIZED (every MPI call under the transport's lock). Measured in
    /// benchmarks/RESULTS.md.
    bool mpi_thread_multiple = false;
    /// The libfabric provider, or "auto": shm between the localities of one host and the
    /// network provider (network_provider()) between hosts, chosen per peer from the hosts the
    /// addresses name (make_transport then opens one endpoint per provider it needs).
    std::string provider = "tcp;ofi_rxm";
    /// This process's host as the launcher names it, and where its peers are: "auto" opens shm
    /// only when another locality shares this host, the network only when one does not.
    std::string host;
    bool peers_on_this_host = true;
    bool peers_on_other_hosts = false;
    /// The network interface for socket-based providers (tcp, sockets); empty: the provider's
    /// choice. The runtime passes "lo" while every locality runs on one host, else the
    /// interface that routes to the peers (network_interface_toward()).
    std::string interface = "lo";
    /// 0: the provider's default_eager_threshold().
    std::size_t eager_threshold = 4096;
    std::size_t posted_receives = 64;
    std::uint64_t job_token = 0;
    /// Name of the endpoint for providers whose endpoints are named objects (shm: the file
    /// /dev/shm/NAME). Empty: "courier-PID-N-RANDOM". courier-run sets it per job and rank and
    /// removes what a killed locality leaves behind.
    std::string endpoint_name;
    /// Bytes of rendezvous reads in flight at most (one parcel is always admitted, whatever its
    /// size, and reads a budget's worth at a time): bounds the receiver's memory under a flood
    /// of large messages, and how long a progress pass of the sender serving the reads lasts. On
    /// shm the bytes a progress pass delivered count too until the pass ends (their tasks have not
    /// run yet). 0: the provider's default_read_budget().
    std::size_t read_budget = 0;
    /// The most bytes of pointer and rma chunks a parcel from a peer may bring (its index, the
    /// data that is not zero copy, is bounded by memory only: the parcel cannot be answered
    /// without it); a larger one is refused before anything is allocated for it, as one whose
    /// landing buffers cannot be allocated is: its bytes are taken off the wire into nothing, its
    /// sender is answered as usual, and it is delivered with its chunks marked not received
    /// (serialization::message::set_refused), so that the call fails with an error naming the
    /// reason. 0: no limit but this machine's memory.
    std::size_t max_parcel_bytes = 0;
    /// Largest single RMA read, in bytes (at least 4096; the provider's max_msg_size caps it).
    /// 0: the provider's default_read_piece().
    std::size_t read_piece = 0;
    /// net (libfabric's socket provider, "tcp"): a rendezvous parcel whose pointer chunks come
    /// to at most this many bytes (at most 3 chunks, an index of at most 4 KiB inline) is sent
    /// whole, as one tagged message into receive buffers the receiver keeps posted for its
    /// size class, instead of announced, read and answered with a DONE: one message on the
    /// socket where a read costs three more (fabric/pushed.hpp). Not between hosts while the
    /// network doorbell wakes idle workers (network_doorbell: it would let a receiver sleep
    /// through a slow pushed message). 0: never; push_max_auto: default_push_max() (net
    /// 256 KiB, others 0).
    std::size_t push_max = push_max_auto;
    static constexpr std::size_t push_max_auto = ~std::size_t{0};
    /// A parcel whose RMA reads have not advanced (none completed) for this long gives its
    /// read budget back, so that one stuck parcel cannot hold up every later one (a provider may
    /// fail a read without saying which). Its buffers stay until the reads complete. The same limit
    /// drops a split message whose second part has not come. 0: never.
    std::chrono::milliseconds read_stall_timeout{10000};
    /// Register the process's rma pool with this transport (rma::attach): pool memory then
    /// travels without registration on send and rma chunks are received into it. One
    /// transport per process can be attached.
    bool attach_rma_pool = false;
    /// shm: a doorbell lets peers wake this process's sleeping workers at once; without it an
    /// idle locality answers after its backoff sleep (up to 1 ms).
    bool doorbell = true;
    /// tcp: the same doorbell instead of the completion queue's wait fd, which rxm/tcp signal
    /// through nested epoll sets at a cost on every message. A doorbell reaches only peers on
    /// this host; when a peer's cannot be opened, idle workers poll in a bounded backoff.
    bool tcp_doorbell = true;
    /// Between hosts (peers_on_other_hosts; a provider other than shm, without the doorbell
    /// above): no wait fd on the completion queue, whose signals through rxm/tcp's nested epoll
    /// sets cost ~1.4 us of every one-way trip; idle workers sleep on a datagram socket of the
    /// network interface instead, which a peer rings when it posts after 250 us of silence
    /// towards this locality (src/net_bell.hpp). When some peer has none, idle workers poll in
    /// a bounded backoff. false: idle workers wait on the completion queue's fd.
    bool network_doorbell = true;
    /// Microseconds between reads of the completion queue while this transport is quiet
    /// (nothing found or sent for 2 ms, no transfer under way; fabric/poll_pacer.hpp); 0:
    /// every progress pass reads it; -1: 20 times what a quiet read costs (2 - 100 us).
    /// make_transport keeps it only for the network rail of a job that also has peers on this
    /// host, where each read (an epoll_wait on tcp) would slow the same host's traffic.
    std::int32_t quiet_poll_us = 0;
    /// shm: a message of a little more than the provider's inject size goes as two parts within
    /// it, which the receiver joins; whole, it would take shm's slower CMA protocol. Only
    /// messages of up to twice the inject size (less two headers) are split.
    bool split_messages = true;
    /// shm: bytes of the outbox (/dev/shm/NAME-outbox) in which the sender stages the chunks of
    /// rendezvous parcels, so that the receiver copies them out of shared memory instead of
    /// reading them with shm's CMA protocol (a system call that pins the sender's pages). 0: no
    /// outbox. A chunk that finds no room goes by an RMA read, as without one.
    std::size_t shm_outbox = std::size_t{8} << 20;
    /// shm: the largest chunk staged in the outbox; larger ones are read from the sender's
    /// memory. 0: default_shm_outbox_chunk().
    std::size_t shm_outbox_chunk = 0;
    /// shm: whether the chunks of a parcel to an idle destination (none of its messages in
    /// flight: a request/reply) are staged too, or read from the sender's memory. -1: staged
    /// on AMD processors only; on an Intel Xeon a single 16 KiB call took 1.3x as long staged
    /// (two copies of lines the other core holds) as read once from memory no one writes.
    /// Chunks to a busy destination (a stream) are staged either way.
    int shm_outbox_idle = -1;
    /// shm: eager messages of up to 16 KiB (small parcels, coalesced messages, announcements
    /// of rendezvous parcels, DONEs) between the localities of one host go through per-pair
    /// rings in shared memory (/dev/shm/NAME-rings, 256 KiB per pair and direction) instead of
    /// shm's own queues, whenever the ring has room (else through shm). The chunks of
    /// rendezvous parcels still travel by the outbox or reads.
    bool shm_rings = true;
    /// shm: the receiver reads the chunks it does not find in an outbox from the sender's memory
    /// itself (process_vm_readv), as libfabric's shm would, but without holding the sender's
    /// region lock for the copy, which stalls the sender's progress meanwhile (large transfers
    /// in both directions then take turns). false: fi_read.
    bool shm_direct_read = true;
    /// send_coalesced() may put a parcel into one message with others to the same destination.
    /// false: it sends at once, like send().
    bool coalescing = true;
    /// A coalesced message is posted as soon as it holds this many parcels, without waiting for
    /// the end of the progress pass, so that the receiver runs them while the sender goes on
    /// (a task posting in a loop reaches the pass only when it ends). Worth it where posting a
    /// message is cheap (shm: 8 B posts ~1.1x faster leaving by count) and not where it is a system
    /// call (tcp: 0.66x at 8). 0: on shm 16, or 8 with a completion handler (rendezvous
    /// announcements, sends waited for), on tcp 16 parcels once they hold 16 KiB (tiny parcels
    /// still fill large batches); the MPI parcelport: 16 when every peer is on this host, else
    /// only the bytes.
    std::size_t coalesce_records = 0;
    /// A parcel is held for a coalesced message while this many messages to its destination
    /// are in flight (posted, completion not seen), or while a coalesced message to it is
    /// open. 0: 1 over sockets (tcp), whose sends complete once the kernel has the bytes (a
    /// lone request or reply finds none in flight: 1 does not delay it; osu_bw 1.13-1.35x at
    /// 8 B - 32 KiB, its replies no longer going two of them alone for each batch of
    /// requests), and on shm with message rings, where a ring's send completes in the next
    /// pass (8 B posts 1.07x); 2 elsewhere (on shm through the provider a send completes when
    /// the peer has taken it, and a request/reply exchange often has one in flight). The MPI
    /// parcelport: 1 (an eager MPI_Isend completes once MPI has buffered it).
    std::uint32_t coalesce_in_flight = 0;
    /// Bounds of the registration cache for on-the-fly (pointer chunk) registrations.
    std::size_t registration_cache_entries = 1024;
    std::size_t registration_cache_bytes = std::size_t{4} << 30;
    /// tcp (rxm): messages one connection takes at a time. rxm copies each into a 16 KiB
    /// bounce buffer it keeps until the kernel took the bytes; past this many, the send waits
    /// in the transport's own queue (the -FI_EAGAIN backlog, a few dozen bytes each) and small
    /// parcels coalesce. rxm's own default (128) lets a slow peer's queue hold 2 MiB per
    /// connection, touched a little more each time the queue runs deeper. 0: rxm's default.
    std::size_t tcp_send_queue = 16;
    /// tcp (rxm): 16 KiB receive buffers rxm posts for all peers together (its shared receive
    /// context; rxm's default is 4096 of them, 64 MiB per process). 0: rxm's default.
    std::size_t tcp_receive_buffers = 256;
    /// mpi: the data tags a sender cycles through per destination (1 - 32000; 0: 32000). Fewer
    /// make a tag come round again while a parcel that had it is still being received (tests).
    std::uint32_t mpi_data_tags = 0;
};

/// Marks the calling thread as one whose progress() calls must stay short: the liveness thread,
/// whose heartbeats wait for its pass. Transports leave what may take long (allocating a large
/// landing buffer) to other threads' passes.
void set_short_progress_only(bool on) noexcept;
bool short_progress_only() noexcept;

/// Sets what libfabric's rxm reads from the environment only once, when libfabric loads its
/// providers at the process's first libfabric call: its eager limit (raised to the largest
/// eager message of a transport with `o.eager_threshold`, or with tcp's default if 0), and
/// o.tcp_send_queue and o.tcp_receive_buffers. A user's own FI_OFI_RXM_* variable wins. Nothing
/// is set when rxm may run over verbs (o.provider is verbs, or is not tcp on a host with RDMA
/// devices): there its eager limit must equal its buffer size. The first call in a process
/// decides; make_transport and network_provider() call it too, so a
/// program calls it only to choose values before either.
void prepare_libfabric(transport_options const& o);

class transport {
public:
    using receive_handler = std::function<void(std::uint32_t source, serialization::message&&)>;
    /// The small parcels of one received coalesced message, or a lone small parcel, each its
    /// whole stream (the bytes serialization::message::from_bytes takes: a single index chunk,
    /// not yet checked), in the order they were sent. The bytes are the transport's: valid
    /// during the call only.
    using batch_handler = std::function<void(std::uint32_t source,
                                             std::span<std::span<std::byte const> const> parcels)>;
    using sent_handler = std::function<void(std::error_code)>;
    /// `sends` sends of send_counted() ended (failed, if `ec`): their callers need no handler
    /// each, only the count.
    using counted_handler = std::function<void(std::size_t sends, std::error_code)>;
    /// A send of send_counted() (or a counted send_stream()) failed: `tag` is the one its
    /// caller gave it (the transport does not read it). Runs once per failed send, before the
    /// counted handler hears of its end.
    using counted_failure_handler = std::function<void(std::uint64_t tag)>;
    using activity_handler = std::function<void(std::uint32_t source)>;
    /// A rendezvous's RMA reads from `source` completed: `bytes` read, the first posted at
    /// `started`.
    using read_handler = std::function<void(std::uint32_t source, std::size_t bytes,
                                            std::chrono::steady_clock::time_point started)>;

    virtual ~transport() = default;
    /// This endpoint's address, to publish to the peers through the bootstrap.
    virtual std::vector<std::byte> address() const = 0;
    /// The addresses of every locality, indexed by rank (including this one). An empty
    /// address (not this one's) marks a peer this transport does not serve: sending to it
    /// throws std::out_of_range, and messages claiming to come from it are dropped. Throws
    /// network_error for an address that cannot be used.
    virtual void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                           std::uint32_t my_rank) = 0;
    virtual void set_receive_handler(receive_handler h) = 0;
    /// Where a transport that receives coalesced messages may hand over their small parcels
    /// together (one call per message) instead of one message each to the receive handler,
    /// which still gets every other parcel. Set-up call; optional, for transports and
    /// handlers alike.
    virtual void set_batch_handler(batch_handler) {}
    /// Called from progress() when `source` shows signs of life other than a whole message
    /// (a piece of an RMA read from it completed): a liveness check must not miss a peer whose
    /// small messages queue behind a large transfer. Set-up call; optional.
    virtual void set_activity_handler(activity_handler) {}
    /// Called from progress() each time the RMA reads of a received parcel (or of its remote
    /// descriptor table) have completed, before the parcel reaches the receive handler
    /// (traces). Set-up call; optional: a transport that reads nothing never calls it.
    virtual void set_read_handler(read_handler) {}
    /// The job-unique token (from the bootstrap) every message must carry; others are dropped.
    virtual void set_job_token(std::uint64_t token) = 0;
    /// Sends `m` to `dest` (see the completion rules above).
    virtual void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) = 0;
    /// As send(), but when a message to `dest` is still in flight, a small eager-only parcel
    /// may wait, coalesced with other parcels to `dest` into one message, until that message
    /// fills up or the next progress() on any thread. It is never held back while nothing is
    /// in flight to `dest`, so a lone parcel leaves at once. Returns true if the parcel waits
    /// (the caller should make sure some thread calls progress() soon).
    virtual bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                                sent_handler on_sent) {
        send(dest, std::move(m), std::move(on_sent));
        return false;
    }
    /// Where the sends of send_counted() report their ends. Set-up call, before the first
    /// send_counted(); a transport over others passes it on.
    virtual void set_counted_handler(counted_handler h) { counted_ = std::move(h); }
    /// Where a failed counted send's tag goes. Set-up call, optional (without it a failure is
    /// only counted); a transport over others passes it on.
    virtual void set_counted_failure_handler(counted_failure_handler h) {
        counted_failed_ = std::move(h);
    }
    /// As send_coalesced(), for a send whose end is only counted: it reaches the counted
    /// handler, which a transport that coalesces calls once for all such parcels of a batch
    /// (no handler is built, stored and run per parcel); if it fails, `tag` reaches the counted
    /// failure handler first. Throws std::logic_error if no counted handler was set.
    virtual bool send_counted(std::uint32_t dest, serialization::message&& m, std::uint64_t tag) {
        require_counted_handler();
        // Two words: std::function keeps them inline (no allocation per send).
        return send_coalesced(dest, std::move(m), [this, tag](std::error_code ec) {
            counted_failed(tag, ec);
            counted_(1, ec);
        });
    }
    /// Writes a parcel's whole stream (a single index chunk: serialization/flat_stream.hpp) at
    /// `at`, the `n` bytes the caller announced.
    using stream_writer = void (*)(void const* ctx, std::byte* at);
    /// The replies to a received batch of requests, gathered: the parcels sent to `dest` from
    /// now on join one coalesced message whatever is in flight, until send_gathered(dest)
    /// posts it (or the end of a progress pass does, as for any held parcel: a request that
    /// blocks holds nothing up for longer). Without it the first replies of a batch leave
    /// alone, each a message of its own. Any thread. The libfabric transport over sockets
    /// (tcp) gathers; elsewhere, and by default, both do nothing.
    virtual void gather(std::uint32_t /*dest*/) noexcept {}
    /// Posts what gather(dest) collected, now (nothing if none).
    virtual void send_gathered(std::uint32_t /*dest*/) noexcept {}
    /// A look, without locks: would a parcel of `n` bytes to `dest` (a known peer) wait in a
    /// batch now (a message to it in flight, or a batch open)? send_stream() decides under
    /// its lock.
    virtual bool batches_now(std::uint32_t /*dest*/, std::size_t /*n*/) const { return false; }
    /// A first look, for a caller that would do work before send_stream(): would it take a
    /// stream of `n` bytes to `dest` (a known peer: a transport with batches, a stream small
    /// enough for one)? False: it would not; the caller sends a message.
    virtual bool takes_streams(std::uint32_t /*dest*/, std::size_t /*n*/) const { return false; }
    /// The largest stream send_stream() takes for `dest`: once the peers are set,
    /// takes_streams(dest, n) is n <= stream_limit(dest), for good (0: none). A caller may keep
    /// it per destination and skip takes_streams() (a virtual call per small post).
    virtual std::size_t stream_limit(std::uint32_t /*dest*/) const noexcept { return 0; }
    /// What send_stream() did with a stream.
    enum class stream_sent : std::uint8_t {
        refused, ///< not taken: nothing written, `on_sent` untouched; send a message instead
        held,    ///< written into the batch held for `dest`, which leaves later (as a parcel
                 ///< send_coalesced() holds: someone must call progress() soon)
        posted,  ///< written into a batch of its own (with whatever a batch open to `dest`
                 ///< held), posted at once
    };
    /// As send_coalesced(), for a parcel whose whole stream is `n` bytes that `write(ctx, at)`
    /// writes (under the batch's lock: it must not block), with no message built for it:
    /// written in place into the batch the transport holds for `dest` if it holds one now, or
    /// else into a batch of its own that leaves at once, which costs the sender a batch's post
    /// where a message costs its whole send path. Its end runs `on_sent` (not null; moved from
    /// once taken) or, with `on_sent` null, is counted (set_counted_handler) with `tag` for
    /// the counted failure handler, as send_counted()'s. Only the
    /// libfabric transport (and the routed one, through its rails) takes any; the MPI
    /// transport, whose batches are built otherwise, and the others take none.
    virtual stream_sent send_stream(std::uint32_t /*dest*/, std::size_t /*n*/,
                                    stream_writer /*write*/, void const* /*ctx*/,
                                    sent_handler* /*on_sent*/, std::uint64_t /*tag*/) {
        return stream_sent::refused;
    }
    /// As send(), for a small control message (a heartbeat) from a thread that must not wait
    /// behind progress(): a transport whose progress() can hold its lock through one long
    /// call (MPI copies a whole matched message inside one) queues it for the next pass
    /// instead of waiting for the lock. It need not wake the peer: the libfabric transport
    /// rings no doorbell for a small one, and a pass that finds only such messages arriving
    /// or ending returns false. The peer reads it at its next progress(), so every locality
    /// must call progress() on its own now and then (the runtime's liveness thread does each
    /// tick).
    virtual void send_control(std::uint32_t dest, serialization::message&& m,
                              sent_handler on_sent) {
        send(dest, std::move(m), std::move(on_sent));
    }
    /// Processes completions and received messages; true if anything happened.
    virtual bool progress() = 0;
    /// One line on the transport's state (sends in flight, pending reads, backlog), for the
    /// diagnosis courier-run asks for when a job overruns its time limit.
    virtual std::string debug_state() const = 0;
    /// A file descriptor readable when progress() has work; -1 if there is none: the caller may
    /// then sleep only briefly and must poll again.
    virtual int wait_fd() const = 0;
    /// Whether wait_fd() may stay quiet although progress() has work (wait_coverage): the
    /// caller bounds its sleeps on it accordingly.
    virtual wait_coverage wait_fd_coverage() const { return wait_coverage::complete; }
    /// Whether the caller may now sleep on wait_fd(). False means progress() has work: keep
    /// polling.
    virtual bool can_sleep() = 0;
    virtual statistics stats() const = 0;
    virtual std::string provider_name() const = 0;
    /// The runtime's flow control admits a parcel that does not fit a destination's byte window
    /// while fewer than this many parcels are in flight to it (or less than half the window is
    /// in use), so that parcels of more than half the window travel this many at a time. Two
    /// let a receiver land the next while the credit for the last travels back (libfabric:
    /// osu_bibw of 4 / 8 MiB 1.6 / 1.5x on shm, 1.2 / 1.3x on tcp, paired medians against one
    /// at a time); a transport whose large transfers slow each other down asks for one.
    virtual std::uint32_t large_parcels_in_flight() const { return 2; }
    /// A byte window of its own for large parcels, where smaller than the runtime's: parcels of
    /// a sixteenth of it or more are admitted to a destination within it by the same rule as
    /// the runtime's window (one over it still goes while less than half of it is in use, or
    /// while fewer than large_parcels_in_flight() parcels are), but they wait only while a
    /// quarter of the runtime's window is in use too (their credits must come back): over a
    /// runtime window of more than twice this one, they get about a quarter of that. 0: the
    /// runtime's window alone.
    virtual std::uint64_t large_parcel_window() const { return 0; }
    /// After set_peers(): whether locality `rank` runs on this host as the peers' addresses
    /// say (a transport that routes by host knows it; others answer false: the caller then
    /// relies on what its launcher says).
    virtual bool same_host(std::uint32_t /*rank*/) const { return false; }
    /// Locality `rank` has failed (the runtime's liveness checks or its launcher say so): the
    /// transport may let go of what it holds for it (libfabric: the mapping of its rma pool
    /// segment, whose pages would otherwise stay resident). Its parcels still being read may
    /// fail. Any thread; once or more per rank.
    virtual void peer_failed(std::uint32_t /*rank*/) noexcept {}
    /// stats() by provider, for a transport that uses several (provider "auto" across hosts).
    virtual std::vector<std::pair<std::string, statistics>> stats_by_provider() const {
        return {{provider_name(), stats()}};
    }

protected:
    counted_handler counted_;                // set_counted_handler()
    counted_failure_handler counted_failed_; // set_counted_failure_handler()
    /// A counted send with `tag` ended with `ec`: its tag to the failure handler if it failed.
    void counted_failed(std::uint64_t tag, std::error_code ec) const {
        if (ec && counted_failed_) {
            counted_failed_(tag);
        }
    }
    /// Refuses a send_counted() whose end could reach no one (a set-up mistake): before the
    /// send, so that it is refused outright, not lost.
    void require_counted_handler() const {
        if (!counted_) {
            throw std::logic_error("courier: send_counted() without a counted handler");
        }
    }
};

/// The transport `o.parcelport` names, opened with `o`: what the runtime calls, so that it
/// never names an implementation. Throws network_error when it cannot be opened, and
/// std::invalid_argument for an unknown name.
std::unique_ptr<transport> make_transport(transport_options const& o);

/// The network provider "auto" uses between hosts: the first of verbs (with ofi_rxm), efa, cxi
/// that fi_getinfo offers for FI_EP_RDM with FI_MSG and FI_RMA, else "tcp" (which
/// make_transport opens as tcp_provider() says).
std::string network_provider();

/// What make_transport opens for the provider "tcp": libfabric's "net" provider (FI_EP_RDM over
/// TCP sockets of its own, libfabric 1.17) where fi_getinfo offers it for FI_EP_RDM with FI_MSG
/// and FI_RMA, else "tcp;ofi_rxm". Every locality of a job must open the same provider:
/// set_peers fails with network_error naming both when a peer's address says it opened
/// another. Over the same sockets net has no rxm layer and signals its completion queue's wait
/// object once per sleep rather than once per completion: lower latency and higher rates
/// (benchmarks/RESULTS.md). Its queue waits through a wait set, as net's own trywait never
/// clears the queue's signal (idle workers kept polling on it). The probe runs once per
/// process; "tcp;ofi_rxm" or "net" given by name is opened as it is.
std::string tcp_provider();

/// The name of the network interface through which this host reaches the IPv4 `address` (the
/// route's source address, looked up without sending anything); when `address` is empty or
/// unroutable: the interface of the default route, else the first interface that is up, not
/// loopback and has an IPv4 address. Empty if there is none.
std::string network_interface_toward(std::string const& address);

/// The libfabric transport (FI_EP_RDM, FI_MSG + FI_RMA): eager messages, RMA-read rendezvous
/// for pointer and rma chunks (libs/parcelport/README.md). Throws network_error, with the
/// provider's message, when the fabric cannot be opened; nothing is left open then.
std::unique_ptr<transport> make_libfabric_transport(transport_options const& o);

/// The MPI transport: non-blocking point-to-point calls on a duplicate of MPI_COMM_WORLD, a
/// header message then each pointer/rma chunk sent from and received into its final memory
/// (libs/parcelport/README.md). MPI is initialized on first use (hold_mpi, mpi.hpp) unless the
/// program did; addresses are MPI ranks. Throws network_error when MPI cannot be used or this
/// build has none.
std::unique_ptr<transport> make_mpi_transport(transport_options const& o);

/// Removes the files in /dev/shm of every transport this process has open (shm endpoints'
/// regions, doorbells): for a process about to end without closing them (std::_Exit). Peers
/// that mapped them keep their mappings; no new peer can open them. Async-signal-safe. The
/// signals that end a process by default (SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGABRT,
/// SIGBUS, SIGSEGV) call it once a transport is open, then the handler installed before.
void remove_shared_memory_files() noexcept;
/// Adds /dev/shm/`name`, made by this process outside a transport, to the files
/// remove_shared_memory_files() and the signal handlers remove, until
/// forget_shared_memory_file(name) (its owner removed it).
void own_shared_memory_file(std::string const& name) noexcept;
void forget_shared_memory_file(std::string const& name) noexcept;

} // namespace courier::parcelport
