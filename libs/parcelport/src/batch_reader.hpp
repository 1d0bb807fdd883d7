// SPDX-License-Identifier: BSL-1.0
// Reading a coalesced message (wire::batch, written with eager_writer.hpp's record writers): its
// records, each one parcel's eager message or (wire::record_compact) its stream alone, for the
// libfabric receiver and the MPI transport.
#pragma once

#include "wire.hpp"

#include <courier/common/log.hpp>

#include <cstring>

namespace courier::parcelport {

/// Calls record(bytes, size, number, compact) for each record of the coalesced message
/// [p, p + len) whose header `h` (from locality h.source) was checked by the caller: `compact`,
/// the record is a parcel's stream alone (wire::record_compact; its first bytes are the
/// stream's, which the callee checks as any received stream), else a whole message (a parcel's
/// eager message, or on libfabric over tcp a DONE) whose own header is the callee's to check. One
/// rate-limited line for each problem: a message whose size is not its header's is dropped whole; a
/// record that runs past the end, is empty, is shorter than a header (an eager message) or has
/// unknown record flags ends it (the records before it are delivered); a record count other than
/// the header's chunk_count, or bytes after the last record, are reported.
template <class Record>
void for_each_record(wire::header const& h, std::byte const* p, std::size_t len, Record&& record) {
    if (h.index_size != len - sizeof h) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "dropped a coalesced message from locality {}: it announces {} "
                               "bytes of parcels and carries {}",
                               h.source, h.index_size, len - sizeof h);
        return;
    }
    std::size_t at = sizeof h;
    std::uint32_t n = 0;
    while (len - at >= wire::record_prefix) {
        std::uint32_t rl = 0, flags = 0;
        std::memcpy(&rl, p + at, sizeof rl);
        std::memcpy(&flags, p + at + sizeof rl, sizeof flags);
        at += wire::record_prefix;
        bool const compact = flags == wire::record_compact;
        // The record with its padding: an unpadded last record would take `at` past `len`.
        if (flags != 0 && !compact) {
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "dropped the rest of a coalesced message from locality {}: a "
                                   "record with unknown record flags {:#x}",
                                   h.source, flags);
            return;
        }
        if (rl == 0 || (!compact && rl < sizeof(wire::header)) ||
            wire::record_size(rl) - wire::record_prefix > len - at) {
            static logging::rate_limit limit;
            logging::error_limited(limit,
                                   "dropped the rest of a coalesced message from locality {}: a "
                                   "record of {} bytes where {} remain",
                                   h.source, rl, len - at);
            return;
        }
        record(p + at, std::size_t{rl}, n, compact);
        at += wire::record_size(rl) - wire::record_prefix;
        ++n;
    }
    if (n != h.chunk_count || at != len) {
        static logging::rate_limit limit;
        logging::error_limited(limit,
                               "a coalesced message from locality {} announced {} records and "
                               "held {}",
                               h.source, h.chunk_count, n);
    }
}

} // namespace courier::parcelport
