// SPDX-License-Identifier: BSL-1.0
// Checkpoint files: see file.hpp for the layout.
#include "crc32c.hpp"

#include <courier/serialization/error.hpp>
#include <courier/serialization/file.hpp>

#include <sys/mman.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace courier::serialization {

namespace {

constexpr char file_magic[8] = {'C', 'O', 'U', 'R', 'C', 'K', 'P', 'T'};
constexpr std::size_t segment_header_size = 16;
constexpr std::size_t segment_alignment = 16; // payloads start 16-byte aligned in the body

constexpr std::size_t padding(std::uint64_t n) {
    return static_cast<std::size_t>((segment_alignment - n % segment_alignment) %
                                    segment_alignment);
}

void put_le(std::byte* p, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
        p[i] = static_cast<std::byte>(v >> (8 * i));
    }
}
std::uint64_t get_le(std::byte const* p, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
        v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    }
    return v;
}

struct file_closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

[[noreturn]] void io_error(std::filesystem::path const& path, char const* what) {
    throw serialization_error("checkpoint " + path.string() + ": " + what + ": " +
                              std::strerror(errno));
}

[[noreturn]] void bad_file(std::filesystem::path const& path, std::string const& what) {
    throw serialization_error("checkpoint " + path.string() + ": " + what);
}

class segment_writer {
public:
    segment_writer(std::FILE* f, std::filesystem::path const& path) : f_(f), path_(path) {}
    void segment(chunk_type t, void const* data, std::size_t n) {
        std::byte h[segment_header_size] = {};
        h[0] = static_cast<std::byte>(t);
        put_le(h + 8, n, 8);
        static constexpr std::byte zeros[segment_alignment] = {};
        write(h, sizeof h);
        write(data, n);
        write(zeros, padding(n));
        ++count_;
    }
    std::uint64_t body_size() const { return body_; }
    std::uint64_t count() const { return count_; }
    std::uint32_t crc() const { return crc_; }

private:
    void write(void const* p, std::size_t n) {
        if (n != 0 && std::fwrite(p, 1, n, f_) != n) {
            io_error(path_, "write failed");
        }
        crc_ = detail::crc32c(crc_, p, n);
        body_ += n;
    }
    std::FILE* f_;
    std::filesystem::path const& path_;
    std::uint64_t body_ = 0;
    std::uint64_t count_ = 0;
    std::uint32_t crc_ = 0;
};

} // namespace

struct checkpoint_writer::impl {
    std::filesystem::path path, tmp;
    std::unique_ptr<char[]> buffer; // outlives f (declared first, destroyed last)
    file_ptr f;
    std::unique_ptr<segment_writer> w;
    bool committed = false;
};

checkpoint_writer::checkpoint_writer(std::filesystem::path path) : impl_(std::make_unique<impl>()) {
    impl_->path = std::move(path);
    impl_->tmp = impl_->path;
    impl_->tmp += ".tmp";
    impl_->f.reset(std::fopen(impl_->tmp.c_str(), "wb"));
    if (!impl_->f) {
        io_error(impl_->tmp, "cannot open for writing");
    }
    // Segments are written one by one (a 16-byte header, then the payload): a 1 MiB stdio
    // buffer coalesces them (with the default 4 KiB one, every payload above 4 KiB cost a
    // write(2) of its own: 8 KiB leaf arrays took twice the time of one big write).
    impl_->buffer.reset(new char[std::size_t{1} << 20]);
    std::setvbuf(impl_->f.get(), impl_->buffer.get(), _IOFBF, std::size_t{1} << 20);
    std::byte header[file_header_size] = {};
    if (std::fwrite(header, 1, sizeof header, impl_->f.get()) != sizeof header) {
        io_error(impl_->tmp, "write failed");
    }
    impl_->w = std::make_unique<segment_writer>(impl_->f.get(), impl_->tmp);
}

checkpoint_writer::~checkpoint_writer() {
    if (!impl_->committed) {
        impl_->f.reset();
        std::error_code ec;
        std::filesystem::remove(impl_->tmp, ec);
    }
}

void checkpoint_writer::index_segment(std::byte const* p, std::size_t n) {
    impl_->w->segment(chunk_type::index, p, n);
}

void checkpoint_writer::external_segment(chunk_type t, void const* p, std::size_t n) {
    impl_->w->segment(t, p, n);
}

std::uint64_t checkpoint_writer::bytes_written() const noexcept {
    return file_header_size + impl_->w->body_size();
}

void checkpoint_writer::commit() {
    auto& w = *impl_->w;
    std::FILE* f = impl_->f.get();
    auto const& path = impl_->tmp;
    std::byte header[file_header_size] = {};
    std::memcpy(header, file_magic, sizeof file_magic);
    put_le(header + 8, file_format_version, 4);
    header[12] =
        std::byte{std::endian::native == std::endian::little ? std::uint8_t{1} : std::uint8_t{2}};
    put_le(header + 16, w.body_size(), 8);
    put_le(header + 24, w.count(), 8);
    put_le(header + 32, w.crc(), 8);
    if (std::fseek(f, 0, SEEK_SET) != 0 ||
        std::fwrite(header, 1, sizeof header, f) != sizeof header) {
        io_error(path, "cannot write header");
    }
    if (std::fflush(f) != 0) {
        io_error(path, "flush failed");
    }
    impl_->f.reset();
    std::error_code ec;
    std::filesystem::rename(impl_->tmp, impl_->path, ec);
    if (ec) {
        throw serialization_error("checkpoint " + impl_->path.string() +
                                  ": cannot rename the finished file into place: " + ec.message());
    }
    impl_->committed = true;
}

void write_message_file(std::filesystem::path const& path, message const& m) {
    checkpoint_writer w(path);
    auto data = m.data();
    for (auto const& c : m.chunks()) {
        if (c.type == chunk_type::index) {
            w.index_segment(data.data() + c.offset, c.size);
        } else {
            w.external_segment(c.type, c.address, c.size);
        }
    }
    w.commit();
}

message read_message_file(std::filesystem::path const& path) {
    file_ptr f(std::fopen(path.c_str(), "rb"));
    if (!f) {
        io_error(path, "cannot open for reading");
    }
    std::error_code ec;
    auto file_size = std::filesystem::file_size(path, ec);
    if (ec) {
        bad_file(path, "cannot stat: " + ec.message());
    }
    // The whole file, mapped (no copy, no zero-filled pages): pointer segments are then
    // referenced in place. Falls back to reading it into memory.
    std::shared_ptr<std::byte[]> bytes;
    if (file_size != 0) {
        void* p = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, ::fileno(f.get()), 0);
        if (p != MAP_FAILED) {
            bytes = std::shared_ptr<std::byte[]>(
                static_cast<std::byte*>(p), [file_size](std::byte* q) { ::munmap(q, file_size); });
        }
    }
    if (!bytes) {
        bytes.reset(new std::byte[file_size == 0 ? 1 : file_size]);
        if (file_size != 0 && std::fread(bytes.get(), 1, file_size, f.get()) != file_size) {
            bad_file(path, "short read");
        }
    }
    try {
        return checkpoint_from_bytes(std::move(bytes), file_size);
    } catch (serialization_error const& e) {
        bad_file(path, e.what());
    }
}

message checkpoint_from_bytes(std::shared_ptr<std::byte[]> bytes, std::size_t file_size) {
    auto fail = [](std::string const& what) -> void { throw serialization_error(what); };
    std::byte const* header = bytes.get();
    if (file_size < file_header_size) {
        fail("truncated header: " + std::to_string(file_size) + " of " +
             std::to_string(file_header_size) + " bytes");
    }
    if (std::memcmp(header, file_magic, sizeof file_magic) != 0) {
        fail("not a Courier checkpoint (bad magic)");
    }
    auto version = get_le(header + 8, 4);
    if (version != file_format_version) {
        fail("unsupported format version " + std::to_string(version) + " (this build reads " +
             std::to_string(file_format_version) + ")");
    }
    auto order = static_cast<std::uint8_t>(header[12]);
    std::uint8_t ours = std::endian::native == std::endian::little ? 1 : 2;
    if (order != ours) {
        fail(std::string("byte order mismatch: written ") +
             (order == 1   ? "little-endian"
              : order == 2 ? "big-endian"
                           : "unknown") +
             ", this host is " + (ours == 1 ? "little" : "big") + "-endian");
    }
    if (header[13] != std::byte{0} || header[14] != std::byte{0} || header[15] != std::byte{0} ||
        get_le(header + 40, 8) != 0 || get_le(header + 36, 4) != 0) {
        fail("reserved header bytes are not zero");
    }
    std::uint64_t body_size = get_le(header + 16, 8);
    std::uint64_t segments = get_le(header + 24, 8);
    auto crc = static_cast<std::uint32_t>(get_le(header + 32, 4));
    if (body_size != file_size - file_header_size) {
        fail("size mismatch: header announces " + std::to_string(body_size) +
             " body bytes, file holds " + std::to_string(file_size - file_header_size) +
             (file_size - file_header_size < body_size ? " (truncated)" : " (trailing bytes)"));
    }
    if (segments > body_size / segment_header_size) {
        fail("segment count " + std::to_string(segments) + " cannot fit in " +
             std::to_string(body_size) + " bytes");
    }
    std::byte const* body = bytes.get() + file_header_size;
    if (detail::crc32c(0, body, body_size) != crc) {
        fail("checksum mismatch: the file is corrupted");
    }

    std::vector<serialization_chunk> chunks;
    std::vector<std::byte> index;
    std::uint64_t at = 0;
    for (std::uint64_t i = 0; i < segments; ++i) {
        if (body_size - at < segment_header_size) {
            fail("segment " + std::to_string(i) + " header runs past the end");
        }
        auto type = static_cast<std::uint8_t>(body[at]);
        for (int k = 1; k < 8; ++k) {
            if (body[at + k] != std::byte{0}) {
                fail("segment " + std::to_string(i) + ": reserved bytes not zero");
            }
        }
        std::uint64_t n = get_le(body + at + 8, 8);
        at += segment_header_size;
        if (n > body_size - at || padding(n) > body_size - at - n) {
            fail("segment " + std::to_string(i) + " of " + std::to_string(n) +
                 " bytes runs past the end of the body");
        }
        for (std::size_t k = 0; k < padding(n); ++k) {
            if (body[at + n + k] != std::byte{0}) {
                fail("segment " + std::to_string(i) + ": padding not zero");
            }
        }
        if (type == static_cast<std::uint8_t>(chunk_type::index)) {
            chunks.push_back({chunk_type::index, n, index.size(), nullptr, 0});
            index.insert(index.end(), body + at, body + at + n);
        } else if (type == static_cast<std::uint8_t>(chunk_type::pointer) ||
                   type == static_cast<std::uint8_t>(chunk_type::rma)) {
            // An rma key means nothing in a file: the bytes come back as a pointer chunk.
            chunks.push_back({chunk_type::pointer, n, 0, body + at, 0});
        } else {
            fail("segment " + std::to_string(i) + ": unknown type " + std::to_string(type));
        }
        at += n + padding(n);
    }
    if (at != body_size) {
        fail(std::to_string(body_size - at) + " bytes after the last segment");
    }
    message m = message::from_parts(index, std::move(chunks));
    std::shared_ptr<void const> owner(std::move(bytes), body);
    for (std::size_t i = 0; i < m.chunks().size(); ++i) {
        if (m.chunks()[i].type != chunk_type::index) {
            m.set_chunk_owner(i, owner);
        }
    }
    return m;
}

} // namespace courier::serialization
