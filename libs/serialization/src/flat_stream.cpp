// SPDX-License-Identifier: BSL-1.0
// flat_reader's errors and slow paths (flat_stream.hpp): the same words as input_archive's.
#include <courier/serialization/detail/varint.hpp>
#include <courier/serialization/error.hpp>
#include <courier/serialization/flat_stream.hpp>

namespace courier::serialization {

void flat_reader::fail(std::string const& what) const {
    throw serialization_error("courier::serialization: " + what + " (at index byte " +
                              std::to_string(position()) + " of " + std::to_string(end_ - begin_) +
                              ")");
}

void flat_reader::throw_truncated(std::size_t n) const {
    fail("truncated archive: needed " + std::to_string(n) + " bytes, " +
         std::to_string(end_ - cur_) + " remain");
}

void flat_reader::fail_block(std::size_t n) const {
    if (n >= threshold_) {
        fail("expected a pointer or rma chunk of " + std::to_string(n) +
             " bytes, but the message has no more");
    }
    throw_truncated(n);
}

void flat_reader::fail_trailing() const {
    fail("trailing garbage: " + std::to_string(end_ - cur_) + " index bytes left unread");
}

std::uint64_t flat_reader::load_size_slow() {
    std::uint64_t v = 0;
    switch (detail::decode_varint(cur_, end_, v)) {
    case detail::varint_read::ok:
        return v;
    case detail::varint_read::truncated:
        throw_truncated(1);
    case detail::varint_read::overflow:
        fail("varint overflows 64 bits");
    case detail::varint_read::too_long:
        break;
    }
    fail("varint longer than 10 bytes");
}

void flat_reader::check_count(std::uint64_t n, std::size_t min_element_bytes) {
    // As input_archive's, with the default load_limits.
    std::string why =
        detail::count_unfit(n, remaining(), min_element_bytes, load_limits{}.max_empty_elements);
    if (!why.empty()) {
        fail(why);
    }
}

} // namespace courier::serialization
