// SPDX-License-Identifier: BSL-1.0
// The eager message layout (little-endian host order; peers share the build).
//   header      48 bytes (below)
//   descriptors chunk_count x 32 bytes: {u8 type, 7 zero, u64 size, u64 remote address, u64 key}
//               for every chunk of the message in stream order (index chunks: address/key 0),
//               then, when the index data is not inline, one more for the index buffer; or,
//               with flag descriptors_remote, one descriptor of the table holding them
//   index data  index_size bytes, if inline
// A coalesced message (kind batch) carries several parcels to one destination:
//   header      48 bytes: kind batch, chunk_count = number of records (parcels, and DONEs
//               below), index_size = the bytes after the header, send_id 0
//   records     chunk_count x {u32 length, u32 record flags, length bytes, zero padding to a
//               multiple of 8}: the bytes are one parcel's eager message (as above, with its own
//               header), or with record flag record_compact one parcel's stream alone (a single
//               index chunk: what serialization::message::from_bytes takes), whose source and
//               job are the batch header's. A small parcel is written compact: 80 bytes less
//               than its eager message (an 8-byte post's record: 48 bytes instead of 128).
//               A record may also be a whole DONE message (below) to the batch's destination,
//               which rode with the batch rather than going alone; chunk_count counts it.
// A split message (kind fragment): a message somewhat larger than the provider's inject size
// goes as two, each within it (on shm a larger message takes the slower CMA protocol).
//   header      48 bytes: kind fragment, send_id = the split message's id at its sender,
//               chunk_count = the part (0: the message's first bytes, 1: the rest),
//               index_size = the length of the whole message
//   bytes       the part's bytes of the message
// The receiver joins the two, in whichever order they come, and handles the result as one
// message (a fragment inside it is dropped).
// A DONE (kind done) tells a sender that the receiver read the chunks of its send send_id;
// with chunk_count = n > 0 (at most max_done_ids - 1), n more such ids (u64 each) follow the
// header: the DONEs of one progress pass to one sender travel together.
#pragma once

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace courier::parcelport::wire {

inline constexpr std::uint32_t magic = 0x4c505243; // "CRPL"
inline constexpr std::uint16_t version = 2;

enum kind : std::uint8_t { parcel = 1, done = 2, batch = 3, fragment = 4 };
/// The most send ids one DONE message carries (the header's and the ones after it).
inline constexpr std::size_t max_done_ids = 64;
/// quiet: a control message (transport::send_control, a liveness beat): it rang no doorbell,
/// and its arrival is no activity at the receiver (libfabric_transport::pass()).
/// pushed: a parcel sent whole as one tagged message (libfabric's net: fabric/pushed.hpp): its
/// inline index, then each pointer chunk's bytes at the message offset its descriptor's address
/// gives (a multiple of pushed_align); nothing is read, and no DONE answers it.
enum flags : std::uint8_t { index_inline = 1, descriptors_remote = 2, quiet = 4, pushed = 8 };
/// Where a pushed parcel's chunks start: cache-line aligned within the receive buffer.
inline constexpr std::size_t pushed_align = 64;

struct header {
    std::uint32_t magic;
    std::uint16_t version;
    std::uint8_t kind;
    std::uint8_t flags;
    std::uint64_t token;
    std::uint32_t source;
    std::uint32_t chunk_count;
    std::uint64_t send_id;
    std::uint64_t index_size;
    std::uint64_t reserved;
};
static_assert(sizeof(header) == 48);

/// A header of kind `kind` from locality `source` of the job `token` (magic and version set;
/// the rest zero, for the writer to fill).
inline header make_header(std::uint8_t kind, std::uint64_t token, std::uint32_t source) noexcept {
    header h{};
    h.magic = magic;
    h.version = version;
    h.kind = kind;
    h.token = token;
    h.source = source;
    return h;
}

/// Stores the 8-byte `v` at `out` (unaligned) from a register. The empty asm keeps the
/// compiler from merging neighbouring words into one 16-byte load from where their fields were
/// just stored: wider loads than the stores that wrote them are not forwarded from the store
/// buffer, and each then waits for those stores to retire.
inline void store_word(std::byte* out, std::uint64_t v) noexcept {
    asm("" : "+r"(v));
    std::memcpy(out, &v, sizeof v);
}

/// Stores `h` at `out` (unaligned) as six words written from its fields. Built on the stack and
/// copied whole, a header was read back by such wider loads: with the descriptors, ~45 % of the
/// samples of the sender's per-parcel record writing (8-byte posts, an AMD EPYC guest).
/// Little-endian, as the wire is.
inline void write_header(std::byte* out, header const& h) noexcept {
    static_assert(std::endian::native == std::endian::little);
    static_assert(offsetof(header, token) == 8 && offsetof(header, source) == 16 &&
                  offsetof(header, send_id) == 24 && offsetof(header, index_size) == 32 &&
                  offsetof(header, reserved) == 40);
    store_word(out, std::uint64_t{h.magic} | std::uint64_t{h.version} << 32 |
                        std::uint64_t{h.kind} << 48 | std::uint64_t{h.flags} << 56);
    store_word(out + 8, h.token);
    store_word(out + 16, std::uint64_t{h.source} | std::uint64_t{h.chunk_count} << 32);
    store_word(out + 24, h.send_id);
    store_word(out + 32, h.index_size);
    store_word(out + 40, h.reserved);
}

struct descriptor {
    std::uint8_t type;
    std::uint8_t zero[7];
    std::uint64_t size;
    std::uint64_t address;
    std::uint64_t key;
};
static_assert(sizeof(descriptor) == 32);

/// Stores a descriptor at `out` (unaligned) from its fields, as write_header does.
inline void write_descriptor(std::byte* out, std::uint8_t type, std::uint64_t size,
                             std::uint64_t address, std::uint64_t key) noexcept {
    static_assert(offsetof(descriptor, size) == 8 && offsetof(descriptor, address) == 16 &&
                  offsetof(descriptor, key) == 24);
    store_word(out, type); // type, then 7 zero bytes
    store_word(out + 8, size);
    store_word(out + 16, address);
    store_word(out + 24, key);
}

inline constexpr std::uint8_t index_buffer_type = 3; // the extra descriptor of a non-inline index
/// With flag descriptors_remote the eager message carries one descriptor of this type instead of
/// the list: the receiver first reads the list (chunk_count descriptors, + 1 for a non-inline
/// index) from the sender's memory, then proceeds as usual. For messages with more chunks than
/// the eager buffer can describe (deep copies with thousands of arrays).
inline constexpr std::uint8_t descriptor_table_type = 4;
/// A batch record's prefix: the length of what follows, and its record flags (u32 each).
inline constexpr std::size_t record_prefix = 8;
/// A record's flags: 0 (an eager message), or this (a parcel's stream alone).
inline constexpr std::uint32_t record_compact = 1;
inline constexpr std::size_t record_size(std::size_t parcel_bytes) noexcept {
    return record_prefix + ((parcel_bytes + 7) & ~std::size_t{7});
}

/// The largest chunk or index a message may announce: 2^47 bytes, the user address space of
/// x86-64 and AArch64 with 4-level page tables. A larger size cannot be real; it is rejected
/// before anything is allocated for it.
inline constexpr std::uint64_t max_chunk_bytes = std::uint64_t{1} << 47;
/// The most chunks one message may have (a 512 MiB descriptor table).
inline constexpr std::uint32_t max_chunks = std::uint32_t{1} << 24;

/// Physical memory plus swap: a parcel that announces more cannot be received here, and is
/// rejected before anything is allocated for it (under ASan an allocation beyond its 1 TiB
/// limit aborts instead of throwing).
inline std::uint64_t machine_memory() {
    static std::uint64_t const bytes = [] {
        long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
        std::uint64_t b =
            pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : max_chunk_bytes;
        struct sysinfo si {};
        if (::sysinfo(&si) == 0) {
            b += std::uint64_t(si.totalswap) * si.mem_unit;
        }
        return std::min<std::uint64_t>(b, max_chunk_bytes);
    }();
    return bytes;
}

} // namespace courier::parcelport::wire
