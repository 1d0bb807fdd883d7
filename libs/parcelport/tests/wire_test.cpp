// SPDX-License-Identifier: BSL-1.0
// wire::write_header and write_descriptor store the same bytes as copying the structs whole
// (the layout the receivers read), for values in every field and for the zeros a struct's
// value-initialization gives.
#include "../src/wire.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstring>

namespace wire = courier::parcelport::wire;

TEST(wire, write_header_stores_the_bytes_of_the_struct) {
    wire::header h{};
    h.magic = wire::magic;
    h.version = 0xa1b2;
    h.kind = wire::batch;
    h.flags = 0xc3;
    h.token = 0x1122334455667788ull;
    h.source = 0x99aabbcc;
    h.chunk_count = 0xddeeff01;
    h.send_id = 0x0102030405060708ull;
    h.index_size = 0xf0e0d0c0b0a09080ull;
    h.reserved = 0x7766554433221100ull;
    std::array<std::byte, sizeof h> copied{}, written{};
    written.fill(std::byte{0x5a}); // every byte must be written
    std::memcpy(copied.data(), &h, sizeof h);
    wire::write_header(written.data(), h);
    EXPECT_EQ(copied, written);
    wire::write_header(written.data(), wire::header{});
    EXPECT_EQ(written, (std::array<std::byte, sizeof h>{}));
}

TEST(wire, write_descriptor_stores_the_bytes_of_the_struct_with_its_zero_bytes) {
    wire::descriptor d{};
    d.type = 0xfe;
    d.size = 0x1020304050607080ull;
    d.address = 0x0a0b0c0d0e0f1011ull;
    d.key = 0x8877665544332211ull;
    std::array<std::byte, sizeof d + 1> copied{}, written{};
    written.fill(std::byte{0x5a});
    copied.fill(std::byte{0x5a});
    std::memcpy(copied.data() + 1, &d, sizeof d); // unaligned, as in a message
    wire::write_descriptor(written.data() + 1, d.type, d.size, d.address, d.key);
    EXPECT_EQ(copied, written);
}
