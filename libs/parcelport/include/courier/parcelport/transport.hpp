// SPDX-License-Identifier: BSL-1.0
// The transport interface between the runtime and the network (LAIK thesis §7.1 argues for a
// minimal one): addresses, peers, sending a serialized message, progress, and delivery.
//
// send() never blocks and never copies the payload of pointer or rma chunks: the receiver pulls
// them with RMA reads. The memory those chunks reference must stay valid until `on_sent` runs
// (the receiver has everything, or the send failed); the transport keeps the message itself
// alive until then. progress() must be called regularly (the runtime's progress hook does);
// it delivers received messages to the receive handler, on the calling thread.
#pragma once

#include <courier/serialization/message.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace courier::parcelport {

struct statistics {
    std::uint64_t messages_sent = 0;
    std::uint64_t messages_received = 0;
    std::uint64_t eager_bytes_sent = 0; ///< header + descriptors + inline index data
    std::uint64_t rma_bytes_read = 0;   ///< bytes this side pulled with RMA reads
    std::uint64_t rma_reads = 0;        ///< RMA reads posted (a chunk may take several pieces)
    /// Parcels whose reads outlived transport_options::read_stall_timeout (their read budget
    /// was returned).
    std::uint64_t stalled_reads = 0;
    std::uint64_t rendezvous_sends = 0; ///< sends that needed RMA reads by the receiver
    /// Memory registrations performed for sends and receives (the rma pool's registrations
    /// of its own blocks are in rma::get_pool_statistics()).
    std::uint64_t registrations = 0;
    std::uint64_t eagain_retries = 0; ///< operations deferred by -FI_EAGAIN
    /// Coalesced messages sent (send_coalesced), and the parcels they carried.
    std::uint64_t batches_sent = 0;
    std::uint64_t parcels_in_batches = 0;
    std::uint64_t bytes_copied_on_send =
        0; ///< index bytes copied into eager buffers (pointer-chunk payload never is)
    std::uint64_t receive_buffers_reused = 0; ///< RMA destinations taken from the buffer pool
    std::uint64_t deferred_rendezvous = 0;    ///< parcels that waited for the read budget
    /// External chunks sent with the rma pool's registration (nothing registered on send).
    std::uint64_t pool_chunks_sent = 0;
    /// External chunks whose registration came from the registration cache / needed one.
    std::uint64_t registration_cache_hits = 0;
    std::uint64_t registration_cache_misses = 0;
    /// rma chunks read into rma pool memory (a received rma_vector adopts it).
    std::uint64_t pool_receive_buffers = 0;
    /// Doorbells this side rang: a peer it sent to was about to sleep (shm, tcp).
    std::uint64_t doorbell_rings = 0;
    /// Messages sent as two parts, each within the provider's inject size (shm: a message a
    /// little over 4 KiB would otherwise take the slower CMA protocol).
    std::uint64_t split_sends = 0;
};

/// The read budget a provider gets by default. shm: 1 MiB. Its reads are copies that the
/// receiving CPU makes (process_vm_readv), so reads in flight add no overlap, only landing
/// buffers; measured on shm at 1 MiB messages, 1 MiB of reads in flight gave 8.5-11.7 GB/s
/// and 16 MiB gave 4.6-5.9 GB/s (the buffers no longer fit in cache). tcp: 2 MiB, together
/// with 256 KiB read pieces: the landing buffers are reused while still in cache and fewer
/// read responses queue on the sender's socket. In osu_courier bw (16 interleaved rounds,
/// 2026-11-23) that pair measured 1.07-1.25x the former 16 MiB / 1 MiB pieces at 512 KiB -
/// 4 MiB messages and 1.06-1.24x OpenMPI TCP at 1-4 MiB; 4 MiB with 256 KiB pieces measured
/// lower. Either change alone measured worse before (benchmarks/RESULTS.md): a 4 MiB budget
/// with 1 MiB pieces in session 14 (Intel), and 512 KiB pieces with 16 MiB in session 15.
/// Other providers: 16 MiB, so that the reads of several large messages overlap on a network
/// with a longer round trip.
std::size_t default_read_budget(std::string_view provider) noexcept;

/// The largest single RMA read a provider gets by default; a larger chunk is read in pieces
/// of this size, all posted at once. shm: 1 GiB (one process_vm_readv per chunk; 1 MiB pieces
/// measured slightly slower at 4 MiB messages). tcp: 256 KiB, with the 2 MiB read budget
/// above: the sender's CPU answers a read by writing the piece to its socket, and on loopback
/// 256 KiB writes moved 1.2x the bytes per second of 1 MiB writes (7 of 8 interleaved pairs
/// of a plain socket program). Other providers: 1 MiB: on RDMA networks pieces of this order
/// let the transfer of one chunk pipeline across the NIC's queues.
std::size_t default_read_piece(std::string_view provider) noexcept;

/// The eager threshold (and the runtime's zero-copy threshold) a provider gets by default:
/// 64 KiB on tcp, where a rendezvous costs a read request's round trip (~20 us on loopback,
/// more than copying 64 KiB; osu_courier latency at 16 / 32 KiB: 24-26 -> 11-14 us with 64 KiB
/// instead of 16 KiB; at 4 / 8 KiB, 16 KiB instead of 4 KiB gave 34.0 / 34.9 -> 12.7 / 14.3 us;
/// the transport raises rxm's own eager limit to match); 8 KiB on shm, whose eager messages
/// of up to 8 KiB go as two parts within its 4 KiB inject size (split_messages): a 4 KiB
/// payload went by rendezvous before (an announcement, a CMA read and a DONE), and osu_courier
/// on shm (6 interleaved rounds, 2026-11-23) measured 4 KiB latency 3.42 -> 1.51 us (native
/// 0.48), 6000 B 3.63 -> 1.73 us (native, by CMA, 2.27), bw 2.4-2.6x at 4-6 KB, 1.48x at 512 B
/// (coalesced batches stay within the inject size); with 8 KiB sent whole, 8 KiB eager gained
/// nothing, and without the split a larger eager threshold gained nothing either. 4 KiB on
/// other providers.
std::size_t default_eager_threshold(std::string_view provider) noexcept;

struct transport_options {
    std::string provider = "tcp;ofi_rxm";
    std::size_t eager_threshold = 4096;
    std::size_t posted_receives = 64;
    std::uint64_t job_token = 0;
    /// Name of the endpoint for providers whose endpoints are named objects (shm: the file
    /// /dev/shm/NAME). Empty: "courier-PID-N-RANDOM". courier-run sets it per job and rank and
    /// removes what a killed locality leaves behind.
    std::string endpoint_name;
    /// Bytes of rendezvous reads in flight at most (one parcel is always admitted, whatever
    /// its size): bounds the receiver's memory under a flood of large messages, and keeps the
    /// pooled landing buffers few enough to stay in cache. 0: the provider's default,
    /// default_read_budget().
    std::size_t read_budget = 0;
    /// Largest single RMA read, in bytes (at least 4096; the provider's max_msg_size caps it).
    /// 0: the provider's default, default_read_piece().
    std::size_t read_piece = 0;
    /// A parcel whose RMA reads are still outstanding after this long gives its read budget
    /// back, so that one stuck parcel cannot hold up every later one (a read the provider
    /// failed without saying which — libfabric 1.17's shm does that for a bad remote address —
    /// never completes). Its buffers stay until the reads complete. The same limit drops a
    /// split message (split_messages) whose second part has not come. 0: never.
    std::chrono::milliseconds read_stall_timeout{10000};
    /// Register the process's rma pool with this transport (rma::attach): pool memory
    /// (rma_vector, rma_object, rma_allocator) then travels without registration on send and
    /// rma chunks are received into it. One transport per process can be attached.
    bool attach_rma_pool = false;
    /// shm: a doorbell (src/doorbell.hpp) lets peers wake this process's sleeping workers at
    /// once; without it an idle locality answers after its backoff sleep (up to 1 ms).
    bool doorbell = true;
    /// tcp: the same doorbell instead of the completion queue's wait fd. With a wait fd, rxm
    /// and tcp in libfabric 1.17 signal it through nested epoll sets on every message, which
    /// costs ~1.3 us per one-way message on loopback (osu_transport, 8 B: 9.4-9.7 us against
    /// 8.0-8.4 without one, native 8.2-8.7). A doorbell only reaches peers on this host (all of
    /// them under courier-run); when a peer's cannot be opened, this locality's idle workers
    /// poll in a bounded backoff (up to 1 ms late) instead. false: the wait fd. (The runtime
    /// asks for it with one worker per locality: with more, a sleeping worker arms the bell
    /// and every message rings it although another worker polls.)
    bool tcp_doorbell = true;
    /// shm: a message of a little more than the provider's inject size (4 KiB in libfabric
    /// 1.17) goes as two parts within it, which the receiver joins. Whole, it would take shm's
    /// CMA protocol (a process_vm_readv by the receiver, then a reply to the sender): a 4 KiB
    /// action's one-way latency with an 8 KiB eager threshold measured 4.2 us sent whole and
    /// 2.6 us split (6 interleaved rounds; native 4 KiB sends 1.2 us in the same rounds).
    /// Only messages of up to twice the inject size (less two headers) are split.
    bool split_messages = true;
    /// send_coalesced() may put a parcel into one message with others to the same destination
    /// (while two messages to it are in flight, or a batch is open). false: it sends at once,
    /// like send().
    bool coalescing = true;
    /// Bounds of the registration cache for on-the-fly (pointer chunk) registrations.
    std::size_t registration_cache_entries = 1024;
    std::size_t registration_cache_bytes = std::size_t{4} << 30;
};

class transport {
public:
    using receive_handler = std::function<void(std::uint32_t source, serialization::message&&)>;
    using sent_handler = std::function<void(std::error_code)>;

    virtual ~transport() = default;
    /// This endpoint's address, to publish to the peers.
    virtual std::vector<std::byte> address() const = 0;
    /// The addresses of every locality, indexed by rank (including this one).
    virtual void set_peers(std::vector<std::vector<std::byte>> const& addresses,
                           std::uint32_t my_rank) = 0;
    virtual void set_receive_handler(receive_handler h) = 0;
    /// The job-unique token (from the bootstrap) every message must carry; others are dropped.
    virtual void set_job_token(std::uint64_t token) = 0;
    /// Sends `m` to `dest`. `on_sent` runs (from progress()) once the receiver has every byte.
    virtual void send(std::uint32_t dest, serialization::message&& m, sent_handler on_sent) = 0;
    /// As send(), but when a message to `dest` is still in flight, a small eager-only parcel
    /// waits, coalesced with other parcels to `dest` into one message, until that message
    /// fills up or the next progress() on any thread (a rendezvous parcel never waits: its
    /// receiver's reads would wait with it). It is never held back while nothing is in
    /// flight to `dest`, so a lone parcel leaves at once. For callers that call progress()
    /// regularly (the runtime's workers); parcels to one destination are not ordered either way.
    /// Returns true if the parcel waits in a batch (the caller may wake a thread that will call
    /// progress()).
    virtual bool send_coalesced(std::uint32_t dest, serialization::message&& m,
                                sent_handler on_sent) {
        send(dest, std::move(m), std::move(on_sent));
        return false;
    }
    /// Processes completions; true if anything happened.
    virtual bool progress() = 0;
    /// One line on the transport's state (in-flight sends, pending reads, backlog), for the
    /// diagnosis courier-run asks for when a job overruns its time limit.
    virtual std::string debug_state() const = 0;
    /// A file descriptor readable when progress() has work (the doorbell's socket); -1 if
    /// there is none: the caller may then sleep only briefly and must poll again.
    virtual int wait_fd() const = 0;
    /// True when wait_fd() may stay quiet although progress() has work (shm's doorbell: a
    /// peer that could not open it never rings): the caller then sleeps with a timeout.
    virtual bool wait_fd_may_miss() const { return false; }
    /// Whether the caller may now sleep (libfabric: fi_trywait when there is a wait fd; shm:
    /// raises the doorbell, then looks for work). False means progress() has work: keep
    /// polling.
    virtual bool can_sleep() = 0;
    virtual statistics stats() const = 0;
    virtual std::string provider_name() const = 0;
};

/// The libfabric transport (FI_EP_RDM, FI_MSG + FI_RMA). Throws std::runtime_error with the
/// provider's message when the fabric cannot be opened.
std::unique_ptr<transport> make_libfabric_transport(transport_options const& o);

} // namespace courier::parcelport
