// SPDX-License-Identifier: BSL-1.0
// Pushed parcels (libfabric's net): a rendezvous-sized parcel sent whole as one tagged message
// into a receive buffer its receiver keeps posted for the message's size class, instead of
// announced, read by the receiver and answered with a DONE.
//
// Why: over sockets a read costs the receiver a read request, the sender a response and the
// receiver a DONE, each a system call on both sides, where the payload is one `sendmsg` of the
// sender and one copy out of the socket at the receiver either way; net places a tagged message
// whose receive is posted straight into that receive's buffer (the kernel's copy is the only
// one), as native libfabric's posted receives do. Receives posted per announced message instead
// (the receiver posting when it learns the size) stop net's connection for a completion-queue
// cycle per message and ran no faster than the reads (benchmarks/RESULTS.md, "Pushed sends on
// net"); so the receives here are posted ahead, a few per size class, and reposted as each
// completes.
//
// Wire: the eager message of the parcel (header with wire::pushed and wire::index_inline,
// descriptors, inline index), zero-padded to wire::pushed_align, then each pointer chunk's
// bytes at the offset its descriptor's address field gives (chunks after the first start where
// the one before ends: the sender pushes only parcels whose chunks but the last are whole
// multiples of pushed_align). The tag is the size class.
//
// Memory: a class holds `per_class` posted buffers; a completed one goes to the parcel (its
// chunks are slices of it, kept alive by aliasing owners) and a new one from the landing-buffer
// pool is posted in its place within the same progress pass. What a receiver holds beyond the
// posted buffers is what its tasks keep of received parcels, as with read parcels; what arrives
// while a class has no receive posted waits in the sender's socket (net stops reading that
// connection), which is the flow control of this path.
#pragma once

#include "context.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace courier::parcelport::fabric {

/// Size classes of pushed parcels: class i takes a message of at most capacity(i) bytes: 2^(17+i)
/// bytes of chunks, and the eager part of at most eager_room bytes before them.
struct push_classes {
    /// Room for the eager part (header, descriptors, inline index) before the chunks: an
    /// eager message's on tcp (96 KiB of index, its default eager threshold, and 4 KiB), so
    /// that a parcel whose index would go eager pushes its blocks too (the runtime's zero-copy
    /// threshold is 64 KiB where parcels are pushed: a 64-96 KiB block beside an index of more
    /// than a few KiB must not be read instead). A class's buffer stays within its landing-pool
    /// block (twice its chunk capacity).
    static constexpr std::size_t eager_room = (96 + 4) << 10;
    static constexpr unsigned first_shift = 17; // 128 KiB of chunks in the first class
    /// A parcel is pushed only with at least this many bytes of chunks (half the first class:
    /// a posted buffer is at most twice what lands in it); smaller ones are read as before.
    static constexpr std::size_t min_chunk_bytes = std::size_t{1} << (first_shift - 1);
    static constexpr unsigned max_classes = 8;
    /// Posted receives per class. Their buffers come from the landing-buffer pool, whose
    /// classes are powers of two: 256 / 512 KiB for the default two classes, 6 MiB in all, of
    /// which only the pages parcels landed in are touched.
    static constexpr std::size_t per_class = 8;
    unsigned count = 0; // 0: nothing pushed

    static constexpr std::size_t chunk_capacity(unsigned i) noexcept {
        return std::size_t{1} << (first_shift + i);
    }
    static constexpr std::size_t capacity(unsigned i) noexcept {
        return chunk_capacity(i) + eager_room;
    }
    /// The classes that cover up to `push_max` bytes of chunks (transport_options::push_max):
    /// none below min_chunk_bytes, at most max_classes.
    static push_classes covering(std::size_t push_max) noexcept {
        push_classes c;
        if (push_max < min_chunk_bytes) {
            return c;
        }
        while (c.count < max_classes && chunk_capacity(c.count) < push_max) {
            ++c.count;
        }
        c.count = c.count < max_classes ? c.count + 1 : max_classes;
        return c;
    }
    /// Where a pushed message's chunks start after its eager part of `eager_size` bytes: the
    /// eager part padded to wire::pushed_align.
    static constexpr std::size_t head(std::size_t eager_size) noexcept {
        return (eager_size + wire::pushed_align - 1) / wire::pushed_align * wire::pushed_align;
    }
    /// The class of a message of `eager` bytes (padded: head()) and `chunks` bytes of chunks;
    /// count if none takes it.
    unsigned class_of(std::size_t eager, std::size_t chunks) const noexcept {
        if (eager > eager_room || chunks < min_chunk_bytes) {
            return count;
        }
        unsigned i = 0;
        while (i < count && chunk_capacity(i) < chunks) {
            ++i;
        }
        return i;
    }
    /// The tag of class i's messages.
    static constexpr std::uint64_t tag(unsigned i) noexcept { return 0x70757368'00000000 | i; }
};

/// A posted receive of a pushed parcel of class `cls`, into `buf` (push_classes::capacity bytes).
struct push_op : op {
    std::shared_ptr<std::byte[]> buf;
    unsigned cls = 0;
    /// False once the provider refused its post for good (the backlog then drops the post): the
    /// receiver's housekeeping posts it again, so that a class never runs out of receives.
    bool postable = true;
    push_op() : op(kind::push) {}
};

} // namespace courier::parcelport::fabric
