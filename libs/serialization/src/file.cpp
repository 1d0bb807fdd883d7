// SPDX-License-Identifier: BSL-1.0
// Checkpoint files: see file.hpp for the layout.
#include "crc32c.hpp"

#include <courier/serialization/detail/type_table.hpp>
#include <courier/serialization/error.hpp>
#include <courier/serialization/file.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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
constexpr std::uint8_t type_table_segment = 3;

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

/// Writes the body of a checkpoint to a file descriptor. Small pieces (segment headers,
/// padding, small payloads) gather in a 64 KiB staging buffer; a payload of 64 KiB or more is
/// written straight from where it lies, in one writev with whatever is staged (no copy).
class segment_writer {
public:
    static constexpr std::size_t staging_size = std::size_t{64} << 10;

    segment_writer(int fd, std::filesystem::path const& path)
        : fd_(fd), path_(path), staging_(new std::byte[staging_size]) {}
    void segment(std::uint8_t type, void const* data, std::size_t n) {
        std::byte h[segment_header_size] = {};
        h[0] = static_cast<std::byte>(type);
        put_le(h + 8, n, 8);
        static constexpr std::byte zeros[segment_alignment] = {};
        put(h, sizeof h);
        put(data, n);
        put(zeros, padding(n));
        ++count_;
    }
    /// Writes out what is staged.
    void flush() { write_out(nullptr, 0); }
    std::uint64_t body_size() const { return body_; }
    std::uint64_t count() const { return count_; }
    std::uint32_t crc() const { return crc_; }

private:
    void put(void const* p, std::size_t n) {
        if (n == 0) {
            return;
        }
        crc_ = detail::crc32c(crc_, p, n);
        body_ += n;
        if (n >= staging_size) {
            write_out(p, n);
            return;
        }
        if (staged_ + n > staging_size) {
            flush();
        }
        std::memcpy(staging_.get() + staged_, p, n);
        staged_ += n;
    }
    /// Writes the staged bytes, then `n` bytes at `p`, retrying short writes and EINTR.
    void write_out(void const* p, std::size_t n) {
        iovec iov[2] = {{staging_.get(), staged_}, {const_cast<void*>(p), n}};
        int first = 0;
        while (first < 2) {
            if (iov[first].iov_len == 0) {
                ++first;
                continue;
            }
            ssize_t done = ::writev(fd_, iov + first, 2 - first);
            if (done < 0) {
                if (errno == EINTR) {
                    continue;
                }
                io_error(path_, "write failed");
            }
            auto left = static_cast<std::size_t>(done);
            for (int i = first; i < 2 && left != 0; ++i) {
                std::size_t k = std::min(left, iov[i].iov_len);
                iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + k;
                iov[i].iov_len -= k;
                left -= k;
            }
        }
        staged_ = 0;
    }
    int fd_;
    std::filesystem::path const& path_;
    std::unique_ptr<std::byte[]> staging_;
    std::size_t staged_ = 0;
    std::uint64_t body_ = 0;
    std::uint64_t count_ = 0;
    std::uint32_t crc_ = 0;
};

// Swaps the finished file with the checkpoint at `path` (renameat2 RENAME_EXCHANGE), when
// `path` exists and is not a directory. Renaming over an existing file makes ext4 allocate and
// start writing the new file's delayed blocks inside rename(2) (its auto_da_alloc heuristic for
// replace-by-rename), an order of magnitude slower for a small checkpoint than exchange +
// unlink (benchmarks/RESULTS.md, Deep copy). Both are atomic for readers
// and against a crash of this process; against power loss only `durable` is (POSIX promises no
// more for either). Returns false where the exchange is not possible (no earlier file, a file
// system or kernel without RENAME_EXCHANGE): the caller then renames.
bool exchange_into_place(std::filesystem::path const& from, std::filesystem::path const& to) {
    struct stat st {};
    if (::lstat(to.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) {
        return false;
    }
    return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0;
}

} // namespace

struct checkpoint_writer::impl {
    std::filesystem::path path, tmp; // tmp == path when writing in place
    checkpoint_options how;
    int fd = -1;
    std::unique_ptr<segment_writer> w;
    bool committed = false;
    ~impl() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};

checkpoint_writer::checkpoint_writer(std::filesystem::path path, checkpoint_options how)
    : impl_(std::make_unique<impl>()) {
    impl_->path = std::move(path);
    impl_->how = how;
    impl_->tmp = impl_->path;
    if (how.atomic) {
        impl_->tmp += ".tmp";
    }
    impl_->fd = ::open(impl_->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (impl_->fd < 0) {
        io_error(impl_->tmp, "cannot open for writing");
    }
    // The body starts after the header, which commit() writes in place.
    if (::lseek(impl_->fd, static_cast<off_t>(file_header_size), SEEK_SET) < 0) {
        io_error(impl_->tmp, "seek failed");
    }
    impl_->w = std::make_unique<segment_writer>(impl_->fd, impl_->tmp);
}

checkpoint_writer::~checkpoint_writer() {
    if (!impl_->committed && impl_->how.atomic) { // impl closes the descriptor
        std::error_code ec;
        std::filesystem::remove(impl_->tmp, ec);
    }
}

void checkpoint_writer::index_segment(std::byte const* p, std::size_t n) {
    impl_->w->segment(static_cast<std::uint8_t>(chunk_type::index), p, n);
}

void checkpoint_writer::external_segment(chunk_type t, void const* p, std::size_t n) {
    impl_->w->segment(static_cast<std::uint8_t>(t), p, n);
}

void checkpoint_writer::type_table(std::span<std::byte const> encoded) {
    impl_->w->segment(type_table_segment, encoded.data(), encoded.size());
}

std::uint64_t checkpoint_writer::bytes_written() const noexcept {
    return file_header_size + impl_->w->body_size();
}

void checkpoint_writer::commit() {
    auto& w = *impl_->w;
    auto const& path = impl_->tmp;
    w.flush();
    std::byte header[file_header_size] = {};
    std::memcpy(header, file_magic, sizeof file_magic);
    put_le(header + 8, file_format_version, 4);
    header[12] =
        std::byte{std::endian::native == std::endian::little ? std::uint8_t{1} : std::uint8_t{2}};
    put_le(header + 16, w.body_size(), 8);
    put_le(header + 24, w.count(), 8);
    put_le(header + 32, w.crc(), 8);
    for (;;) {
        ssize_t done = ::pwrite(impl_->fd, header, sizeof header, 0);
        if (done == static_cast<ssize_t>(sizeof header)) {
            break;
        }
        if (done < 0 && errno == EINTR) {
            continue;
        }
        io_error(path, "cannot write header");
    }
    if (impl_->how.durable && ::fdatasync(impl_->fd) != 0) {
        io_error(path, "fdatasync failed");
    }
    int fd = std::exchange(impl_->fd, -1);
    if (::close(fd) != 0) {
        io_error(path, "close failed");
    }
    bool exchanged = false;
    if (impl_->how.atomic) {
        exchanged = exchange_into_place(impl_->tmp, impl_->path);
        if (!exchanged) {
            std::error_code ec;
            std::filesystem::rename(impl_->tmp, impl_->path, ec);
            if (ec) {
                throw serialization_error(
                    "checkpoint " + impl_->path.string() +
                    ": cannot rename the finished file into place: " + ec.message());
            }
        }
    }
    if (impl_->how.durable) { // the directory entry too
        auto dir = impl_->path.parent_path();
        int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || ::fsync(dfd) != 0) {
            if (dfd >= 0) {
                ::close(dfd);
            }
            io_error(impl_->path, "cannot sync its directory");
        }
        ::close(dfd);
    }
    impl_->committed = true;
    if (exchanged) {
        // PATH.tmp now names the previous checkpoint. Unlinking it frees its blocks (anyone who
        // still maps it keeps its bytes unchanged); if that fails, the next save truncates it.
        ::unlink(impl_->tmp.c_str());
    }
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
    if (version != 1 && version != file_format_version) {
        fail("unsupported format version " + std::to_string(version) + " (this build reads 1 to " +
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

    // First pass: check the segment structure and list the chunks (index chunks with their
    // offsets in the index stream). Second pass: copy the index segments, once, straight into
    // the message's buffer; pointer segments stay where they are in the file's memory.
    std::vector<serialization_chunk> chunks;
    std::vector<std::uint64_t> index_at; // body offset of each index chunk's bytes
    std::size_t index_size = 0;
    std::shared_ptr<detail::type_table const> types;
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
            chunks.push_back({chunk_type::index, n, index_size, nullptr, 0});
            index_at.push_back(at);
            index_size += n;
        } else if (type == static_cast<std::uint8_t>(chunk_type::pointer) ||
                   type == static_cast<std::uint8_t>(chunk_type::rma)) {
            // An rma key means nothing in a file: the bytes come back as a pointer chunk.
            chunks.push_back({chunk_type::pointer, n, 0, body + at, 0});
        } else if (type == type_table_segment && version >= 2) {
            if (types) {
                fail("segment " + std::to_string(i) + ": a second type table");
            }
            try {
                types = std::make_shared<detail::type_table const>(
                    detail::type_table::decode({body + at, static_cast<std::size_t>(n)}));
            } catch (serialization_error const& e) {
                fail("segment " + std::to_string(i) + ": " + e.what());
            }
        } else {
            fail("segment " + std::to_string(i) + ": unknown type " + std::to_string(type));
        }
        at += n + padding(n);
    }
    if (at != body_size) {
        fail(std::to_string(body_size - at) + " bytes after the last segment");
    }
    message m = message::with_index_buffer(index_size);
    std::size_t k = 0;
    for (auto const& c : chunks) {
        if (c.type == chunk_type::index) {
            std::memcpy(m.index_buffer() + c.offset, body + index_at[k++], c.size);
        }
    }
    m.complete_parts(std::move(chunks));
    m.set_type_table(std::move(types));
    std::shared_ptr<void const> owner(std::move(bytes), body);
    for (std::size_t i = 0; i < m.chunks().size(); ++i) {
        if (m.chunks()[i].type != chunk_type::index) {
            m.set_chunk_owner(i, owner);
        }
    }
    return m;
}

} // namespace courier::serialization
