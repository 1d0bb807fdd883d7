// SPDX-License-Identifier: BSL-1.0
// Pins the wire bytes documented in libs/serialization/README.md. If one of these changes, the
// format changed: bump message_format_version and update the README.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <cstdio>

namespace cs = courier::serialization;

namespace {

std::string hex(cs::message const& m) {
    std::string s;
    char buf[4];
    for (auto b : m.data()) {
        std::snprintf(buf, sizeof buf, "%02x ", static_cast<unsigned>(b));
        s += buf;
    }
    if (!s.empty()) {
        s.pop_back();
    }
    return s;
}

std::string const header = "43 52 01 00 00 10 00 00"; // 'C' 'R' v1 LE threshold 4096

} // namespace

TEST(wire_format, header_records_threshold_and_zero_copy_off) {
    EXPECT_EQ(hex(cs::save()), header);
    EXPECT_EQ(hex(cs::save(cs::options{256, true})), "43 52 01 00 00 01 00 00");
    EXPECT_EQ(hex(cs::save(cs::options{4096, false})), "43 52 01 00 ff ff ff ff");
}

TEST(wire_format, integers_keep_native_width) {
    EXPECT_EQ(hex(cs::save(std::int32_t{1})), header + " 01 00 00 00");
    EXPECT_EQ(hex(cs::save(std::uint8_t{0xab}, std::int16_t{-2})), header + " ab fe ff");
    EXPECT_EQ(hex(cs::save(true, 1.0)), header + " 01 00 00 00 00 00 00 f0 3f");
}

TEST(wire_format, strings_and_vectors_have_varint_sizes) {
    EXPECT_EQ(hex(cs::save(std::string("hi"))), header + " 02 68 69");
    EXPECT_EQ(hex(cs::save(std::vector<std::uint16_t>{1, 2})), header + " 02 01 00 02 00");
    auto m = cs::save(std::vector<char>(300, 'a'));
    EXPECT_EQ(hex(m).substr(0, header.size() + 9), header + " ac 02 61");
    EXPECT_EQ(hex(cs::save(std::vector<bool>{true, false, true})), header + " 03 05");
}

TEST(wire_format, optional_variant_and_shared_ptr_tags) {
    EXPECT_EQ(hex(cs::save(std::optional<int>{}, std::variant<int, double>{2.0})),
              header + " 00 01 00 00 00 00 00 00 00 40");
    auto p = std::make_shared<std::int32_t>(5);
    EXPECT_EQ(hex(cs::save(p, p, std::shared_ptr<int>{})), header + " 01 05 00 00 00 02 00");
}

TEST(wire_format, pointer_chunk_leaves_only_the_count_in_the_index) {
    std::vector<std::uint8_t> big(4096, 1);
    auto m = cs::save(big, std::uint8_t{9});
    EXPECT_EQ(hex(m), header + " 80 20 09");
    ASSERT_EQ(m.chunks().size(), 3u);
    EXPECT_EQ(m.chunks()[0].size, 10u);
    EXPECT_EQ(m.chunks()[1].size, 4096u);
    EXPECT_EQ(m.chunks()[2].offset, 10u);
    EXPECT_EQ(m.chunks()[2].size, 1u);
}
