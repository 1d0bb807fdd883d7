// SPDX-License-Identifier: BSL-1.0
// Evolution of checkpoint files: evo::sample was unversioned when evolution_writer wrote the
// files in DIR; here it has version 1 and a new field, and still reads them.
//   serialization_evolution_test DIR
#include "../src/crc32c.hpp"

#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cs = courier::serialization;
namespace fs = std::filesystem;

namespace evo {
struct sample {
    static constexpr unsigned courier_serialization_version = 1;
    int id = 0;
    std::string name;
    std::vector<int> tags{-1}; // new in version 1
    template <class A>
    void serialize(A& ar, unsigned version) {
        ar& id& name;
        if (version >= 1) {
            ar& tags;
        }
    }
};
struct record {
    std::vector<sample> samples;
    double time;
};
struct ahead {
    static constexpr unsigned courier_serialization_version = 1;
    int x = 0;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& x;
    }
};
} // namespace evo

namespace {

fs::path data_dir;

std::vector<char> read_all(fs::path const& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

fs::path scratch(std::string const& name) {
    return fs::temp_directory_path() /
           ("courier_evolution_" + std::to_string(::getpid()) + "_" + name);
}

} // namespace

TEST(evolution, a_file_written_before_the_type_gained_a_version_reads) {
    evo::record r{};
    std::string tail;
    cs::load_from_file(data_dir / "unversioned_sample.ckpt", r, tail);
    ASSERT_EQ(r.samples.size(), 3U);
    EXPECT_EQ(r.samples[2].id, 3);
    EXPECT_EQ(r.samples[2].name, "three");
    EXPECT_EQ(r.samples[2].tags, std::vector<int>{-1}); // not in the file: the default
    EXPECT_EQ(r.time, 0.5);
    EXPECT_EQ(tail, "tail");
}

TEST(evolution, the_file_lists_each_type_once_with_its_version) {
    auto m = cs::read_message_file(data_dir / "unversioned_sample.ckpt");
    ASSERT_NE(m.type_table(), nullptr);
    EXPECT_EQ(m.type_table()->find(typeid(evo::sample).name()), 0);
    EXPECT_EQ(m.type_table()->find(typeid(evo::record).name()), 0);
    EXPECT_EQ(m.type_table()->size(), 2U); // std::string, std::vector: formats of their own
}

TEST(evolution, data_newer_than_the_code_is_refused_by_name) {
    evo::ahead a;
    try {
        cs::load_from_file(data_dir / "newer_than_reader.ckpt", a);
        FAIL() << "loaded version 3 data with version 1 code";
    } catch (cs::serialization_error const& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("evo::ahead has class version 3, newer than this program's version 1"),
                  std::string::npos)
            << what;
    }
}

TEST(evolution, new_files_carry_the_new_version_and_the_new_field) {
    auto p = scratch("new");
    evo::record r{{{9, "nine", {1, 2, 3}}}, 2.0};
    cs::save_to_file(p, r);
    evo::record back{};
    cs::load_from_file(p, back);
    fs::remove(p);
    ASSERT_EQ(back.samples.size(), 1U);
    EXPECT_EQ(back.samples[0].tags, (std::vector<int>{1, 2, 3}));
}

TEST(evolution, versions_are_written_once_per_file_and_inline_in_messages) {
    std::vector<evo::sample> many(1000, evo::sample{1, "x", {}});
    auto m = cs::save(many); // a message: one version byte before each sample
    auto p = scratch("many");
    cs::save_to_file(p, many);
    auto f = cs::read_message_file(p);
    fs::remove(p);
    EXPECT_EQ(m.index_size(), f.index_size() + many.size());
    std::vector<evo::sample> a, b;
    cs::load(m, a);
    cs::load(f, b);
    EXPECT_EQ(a.size(), 1000U);
    EXPECT_EQ(b.size(), 1000U);
}

TEST(evolution, a_type_missing_from_the_table_is_a_clear_error) {
    auto p = scratch("missing");
    cs::save_to_file(p, evo::ahead{1}); // the table lists evo::ahead only
    evo::sample s;
    try {
        cs::load_from_file(p, s);
        FAIL() << "loaded a type the file does not list";
    } catch (cs::serialization_error const& e) {
        EXPECT_NE(std::string(e.what()).find("does not list evo::sample"), std::string::npos)
            << e.what();
    }
    fs::remove(p);
}

TEST(evolution, damaged_type_tables_are_rejected) {
    auto p = scratch("damaged");
    cs::save_to_file(p, evo::ahead{1});
    auto good = read_all(p);
    fs::remove(p);
    // The table is the last segment: u32 count, u32 version, u32 length, name, padding.
    std::size_t name_len = std::strlen(typeid(evo::ahead).name());
    std::size_t padded = (12 + name_len + 15) / 16 * 16;
    std::size_t table = good.size() - padded;
    auto with = [&](auto&& edit) {
        auto b = good;
        edit(b);
        auto body = std::span(reinterpret_cast<std::byte const*>(b.data()) + cs::file_header_size,
                              b.size() - cs::file_header_size);
        std::uint32_t crc = courier::serialization::detail::crc32c(0, body.data(), body.size());
        std::memcpy(b.data() + 32, &crc, 4); // a valid checksum: the table itself is checked
        auto bytes = std::shared_ptr<std::byte[]>(new std::byte[b.size()]);
        std::memcpy(bytes.get(), b.data(), b.size());
        try {
            (void)cs::checkpoint_from_bytes(bytes, b.size());
        } catch (cs::serialization_error const& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(with([](auto&) {}), "no error");
    EXPECT_NE(with([&](auto& b) { b[table] = 50; }).find("entries cannot fit"), std::string::npos);
    EXPECT_NE(with([&](auto& b) { b[table + 8] = 0; }).find("name of 0 bytes"), std::string::npos);
    EXPECT_NE(with([&](auto& b) { b[table + 8] = char(name_len + 1); }).find("name of"),
              std::string::npos);
    EXPECT_NE(with([&](auto& b) { b[table + 8] = char(name_len - 1); }).find("after the last"),
              std::string::npos);
    EXPECT_NE(with([&](auto& b) { b[cs::file_header_size] = 3; }), "no error"); // index as table
    // Format 1 had no type tables.
    EXPECT_NE(with([](auto& b) { b[8] = 1; }).find("unknown type 3"), std::string::npos);
    // A second copy of the table (segment count and body size updated to match).
    EXPECT_NE(with([&](auto& b) {
                  std::vector<char> seg(b.end() - static_cast<std::ptrdiff_t>(padded + 16),
                                        b.end());
                  b.insert(b.end(), seg.begin(), seg.end());
                  for (std::size_t field : {std::size_t{16}, std::size_t{24}}) {
                      std::uint64_t v = 0;
                      std::memcpy(&v, b.data() + field, 8);
                      v += field == 16 ? seg.size() : 1;
                      std::memcpy(b.data() + field, &v, 8);
                  }
              }).find("a second type table"),
              std::string::npos);
}

TEST(evolution, a_version_1_file_without_a_table_still_reads) {
    // Format 1 had no type table and versions inline: write_message_file writes that body.
    auto p = scratch("v1");
    cs::write_message_file(p, cs::save(evo::sample{4, "four", {8}}));
    auto b = read_all(p);
    b[8] = 1; // format version 1 (not covered by the checksum)
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(b.data(), static_cast<std::streamsize>(b.size()));
    evo::sample s;
    cs::load_from_file(p, s);
    fs::remove(p);
    EXPECT_EQ(s.name, "four");
    EXPECT_EQ(s.tags, std::vector<int>{8});
}

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s DIR (the checkpoint files evolution_writer wrote)\n",
                     argv[0]);
        return 2;
    }
    data_dir = argv[1];
    return RUN_ALL_TESTS();
}
