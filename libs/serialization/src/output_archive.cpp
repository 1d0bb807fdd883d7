// SPDX-License-Identifier: BSL-1.0
#include <courier/serialization/detail/tracking.hpp>
#include <courier/serialization/flat_stream.hpp>
#include <courier/serialization/output_archive.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace courier::serialization {

namespace {
// One eager message's worth: most parcels never grow, and malloc serves it from its bins.
constexpr std::size_t initial_capacity = message::pooled_capacity;
} // namespace

output_archive::output_archive(message& m) : msg_(m) {
    start(default_options());
}

output_archive::output_archive(message& m, options const& o) : msg_(m) {
    start(o);
}

output_archive::output_archive(message& m, options const& o, chunk_sink* sink)
    : msg_(m), sink_(sink) {
    if (sink_ != nullptr && msg_.capacity_ < streaming_buffer_size) {
        msg_.grow_to(streaming_buffer_size);
    }
    if (sink_ != nullptr && sink_->records_types()) {
        types_ = std::make_unique<detail::type_recorder>();
    }
    start(o);
}

output_archive::~output_archive() {
    if (!finished_ && sink_ == nullptr) { // a streaming archive is finished by its owner
        finish();
    }
}

stream_threshold stream_threshold_of(options const& o) noexcept {
    std::size_t threshold = o.zero_copy ? std::max<std::size_t>(o.zero_copy_threshold, 1)
                                        : std::numeric_limits<std::size_t>::max();
    // Thresholds beyond 32 bits cannot be recorded: they mean "never" in practice.
    if (threshold >= threshold_zero_copy_off) {
        return {std::numeric_limits<std::size_t>::max(), threshold_zero_copy_off};
    }
    return {threshold, static_cast<std::uint32_t>(threshold)};
}

void write_stream_header(std::byte* at, std::uint32_t recorded) noexcept {
    std::byte const header[message_header_size] = {
        std::byte{'C'},
        std::byte{'R'},
        std::byte{message_format_version},
        std::byte{std::endian::native == std::endian::big ? std::uint8_t{1} : std::uint8_t{0}},
        std::byte(recorded & 0xff),
        std::byte((recorded >> 8) & 0xff),
        std::byte((recorded >> 16) & 0xff),
        std::byte((recorded >> 24) & 0xff)};
    std::memcpy(at, header, sizeof header);
}

void output_archive::start(options const& o) {
    msg_.clear(); // a first chunk is held inline, a second one takes a cached chunk list
    tracking_kind_ = o.tracking;
    stream_threshold const t = stream_threshold_of(o);
    threshold_ = t.threshold;
    deep_threshold_ = !o.zero_copy                  ? std::numeric_limits<std::size_t>::max()
                      : o.deep_array_threshold != 0 ? o.deep_array_threshold
                                                    : threshold_;
    if (msg_.capacity_ < initial_capacity) {
        msg_.grow_to(initial_capacity);
    }
    begin_ = msg_.buffer_;
    cur_ = begin_;
    end_ = begin_ + msg_.capacity_;
    write_stream_header(cur_, t.recorded); // the buffer has room: initial_capacity
    cur_ += message_header_size;
    chunk_start_ = 0;
}

void output_archive::flush_to_sink() {
    std::size_t at = index_bytes();
    if (at > 0) {
        sink_->index_segment(begin_, at);
    }
    cur_ = begin_;
    chunk_start_ = 0;
}

void output_archive::grow(std::size_t n) {
    if (sink_ != nullptr) {
        flush_to_sink();
        if (n <= static_cast<std::size_t>(end_ - cur_)) {
            return;
        }
    }
    std::size_t size = index_bytes();
    std::size_t want = std::max(msg_.capacity_ * 2, size + n);
    msg_.size_ = size; // only the written bytes are preserved (and counted) by growth
    msg_.grow_to(want);
    begin_ = msg_.buffer_;
    cur_ = begin_ + size;
    end_ = begin_ + msg_.capacity_;
}

void output_archive::close_index_chunk() {
    std::size_t at = index_bytes();
    if (at > chunk_start_) {
        msg_.add_chunk({chunk_type::index, at - chunk_start_, chunk_start_, nullptr, 0});
        chunk_start_ = at;
    }
}

void output_archive::add_external(chunk_type t, void const* p, std::size_t n, std::uint64_t rkey) {
    if (sink_ != nullptr) {
        flush_to_sink();
        sink_->external_segment(t, p, n);
        return;
    }
    close_index_chunk();
    msg_.add_chunk({t, n, 0, static_cast<std::byte const*>(p), rkey});
}

void output_archive::keep_alive(std::shared_ptr<void const> ref) {
    msg_.keep_alive(std::move(ref));
}

void output_archive::finish() {
    msg_.checked_ = false; // written since start() (which cleared it too)
    if (sink_ != nullptr) {
        if (!finished_) {
            flush_to_sink();
            if (types_) {
                auto table = types_->table().encode();
                sink_->type_table(table);
            }
        }
        msg_.size_ = 0;
        finished_ = true;
        return;
    }
    close_index_chunk();
    msg_.size_ = index_bytes();
    finished_ = true;
}

void output_archive::defer_node(void const* node, node_saver saver) {
    deferred_.push({node, saver}, [this](deferred_node const& d) { d.save(*this, d.node); });
}

detail::save_tracking& output_archive::tracking() {
    if (!tracking_) {
        tracking_ = std::make_unique<detail::save_tracking>(tracking_kind_ ==
                                                            pointer_tracking::std_unordered_map);
    }
    return *tracking_;
}

} // namespace courier::serialization
