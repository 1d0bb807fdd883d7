// SPDX-License-Identifier: BSL-1.0
// Checkpoint files: round trips and every kind of damage.
#include <courier/serialization.hpp>

#include <gtest/gtest.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <fcntl.h>
#include <fstream>
#include <random>

namespace cs = courier::serialization;
namespace fs = std::filesystem;

namespace {

struct state {
    std::vector<double> field;
    std::map<std::string, int> counters;
    std::string title;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& field& counters& title;
    }
    bool operator==(state const&) const = default;
};

class checkpoint : public ::testing::Test {
protected:
    fs::path path = fs::temp_directory_path() /
                    ("courier_ckpt_" + std::to_string(::getpid()) + "_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    void TearDown() override { fs::remove(path); }

    state sample() {
        state s;
        s.field.assign(100000, 0.25); // a pointer chunk in memory, a segment in the file
        s.field[5] = 5;
        s.counters = {{"a", 1}, {"b", 2}};
        s.title = "run 7";
        return s;
    }
    std::vector<char> read_all() {
        std::ifstream f(path, std::ios::binary);
        return {std::istreambuf_iterator<char>(f), {}};
    }
    void write_all(std::vector<char> const& b) {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(b.data(), static_cast<std::streamsize>(b.size()));
    }
    std::string load_error() {
        state s;
        try {
            cs::load_from_file(path, s);
        } catch (cs::serialization_error const& e) {
            return e.what();
        }
        return "no error";
    }
};

} // namespace

TEST_F(checkpoint, round_trip) {
    auto s = sample();
    cs::save_to_file(path, s, 42);
    state s2;
    int i = 0;
    cs::load_from_file(path, s2, i);
    EXPECT_EQ(s2, s);
    EXPECT_EQ(i, 42);
}

TEST_F(checkpoint, header_fields) {
    cs::save_to_file(path, sample());
    auto b = read_all();
    ASSERT_GE(b.size(), cs::file_header_size);
    EXPECT_EQ(std::string(b.data(), 8), "COURCKPT");
    EXPECT_EQ(b[8], 2);  // format version
    EXPECT_EQ(b[12], 1); // little-endian writer
    std::uint64_t body = 0;
    std::memcpy(&body, b.data() + 16, 8);
    EXPECT_EQ(body + cs::file_header_size, b.size());
}

TEST_F(checkpoint, serialize_buffer_adopts_file_memory) {
    cs::serialize_buffer<double> big(10000);
    std::fill(big.begin(), big.end(), 2.0);
    cs::save_to_file(path, big);
    auto m = cs::read_message_file(path);
    cs::serialize_buffer<double> out;
    cs::load(m, out);
    EXPECT_EQ(out, big);
    ASSERT_EQ(m.external_chunk_count(), 1u);
    EXPECT_EQ(reinterpret_cast<std::byte const*>(out.data()), m.chunks()[1].address);
}

TEST_F(checkpoint, replacing_a_checkpoint_leaves_no_scratch_file_and_spares_adopted_memory) {
    // A load adopts pointer segments from the mapped file. Later saves replace the file (swap +
    // unlink, or rename): the adopted bytes must not change, and no PATH.tmp may stay behind.
    cs::serialize_buffer<double> first(10000);
    std::fill(first.begin(), first.end(), 1.0);
    cs::save_to_file(path, first);
    auto m = cs::read_message_file(path);
    cs::serialize_buffer<double> adopted;
    cs::load(m, adopted);
    ASSERT_EQ(reinterpret_cast<std::byte const*>(adopted.data()), m.chunks()[1].address);
    for (double v : {2.0, 3.0, 4.0}) {
        cs::serialize_buffer<double> next(10000);
        std::fill(next.begin(), next.end(), v);
        cs::save_to_file(path, next);
        EXPECT_FALSE(fs::exists(fs::path(path.string() + ".tmp")));
        cs::serialize_buffer<double> back;
        cs::load_from_file(path, back);
        EXPECT_EQ(back, next);
    }
    EXPECT_EQ(adopted, first);
}

namespace {
// Makes renameat2 fail with EINVAL in this process, as on a file system without
// RENAME_EXCHANGE (seccomp). False if the kernel or a container refuses the filter.
bool forbid_renameat2() {
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_renameat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}
} // namespace

#if defined(__x86_64__)
TEST_F(checkpoint, without_rename_exchange_a_save_renames_over_the_previous_checkpoint) {
    // The exchange + unlink path needs renameat2(RENAME_EXCHANGE); where the file system lacks
    // it, the finished file is renamed over the old one. A child process forbids renameat2
    // and replaces a checkpoint; its exit status says what it saw.
    cs::save_to_file(path, std::string("first"));
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (!forbid_renameat2()) {
            ::_exit(77);
        }
        // The filter works: the exchange itself now fails.
        if (::renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE) == 0 || errno != EINVAL) {
            ::_exit(2);
        }
        try {
            cs::save_to_file(path, std::string("second"));
            std::string back;
            cs::load_from_file(path, back);
            if (back != "second") {
                ::_exit(3);
            }
            if (fs::exists(fs::path(path.string() + ".tmp"))) {
                ::_exit(4);
            }
        } catch (...) {
            ::_exit(5);
        }
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        GTEST_SKIP() << "cannot install a seccomp filter here (needed to forbid renameat2)";
    }
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: renameat2 still worked, 3: wrong content, "
                                         "4: scratch file left, 5: save or load threw";
    std::string back;
    cs::load_from_file(path, back);
    EXPECT_EQ(back, "second");
}
#endif

TEST_F(checkpoint, saving_over_a_directory_is_an_error_that_keeps_the_directory) {
    fs::create_directory(path);
    fs::path inside = path / "keep";
    std::ofstream(inside) << "x";
    std::string error;
    try {
        cs::save_to_file(path, sample());
    } catch (cs::serialization_error const& e) {
        error = e.what();
    }
    EXPECT_NE(error.find("cannot rename"), std::string::npos) << error;
    EXPECT_TRUE(fs::is_directory(path));
    EXPECT_TRUE(fs::exists(inside));
    EXPECT_FALSE(fs::exists(fs::path(path.string() + ".tmp")));
    fs::remove_all(path);
}

TEST_F(checkpoint, truncation_at_every_length_is_detected) {
    state small;
    small.title = "t";
    small.field = {1, 2};
    cs::save_to_file(path, small);
    auto b = read_all();
    for (std::size_t n = 0; n < b.size(); ++n) {
        write_all({b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n)});
        EXPECT_NE(load_error(), "no error") << "truncated to " << n;
    }
}

TEST_F(checkpoint, every_flipped_byte_is_detected) {
    state small;
    small.title = "t";
    small.field = {1, 2};
    cs::save_to_file(path, small);
    auto b = read_all();
    for (std::size_t i = 0; i < b.size(); ++i) {
        auto c = b;
        c[i] ^= 0x10;
        write_all(c);
        EXPECT_NE(load_error(), "no error") << "byte " << i;
    }
}

TEST_F(checkpoint, specific_damage_gets_specific_messages) {
    cs::save_to_file(path, sample());
    auto b = read_all();
    auto c = b;
    c[0] = 'X';
    write_all(c);
    EXPECT_NE(load_error().find("bad magic"), std::string::npos);
    c = b;
    c[8] = 9;
    write_all(c);
    EXPECT_NE(load_error().find("format version 9"), std::string::npos);
    c = b;
    c[12] = 2;
    write_all(c);
    EXPECT_NE(load_error().find("byte order"), std::string::npos);
    c = b;
    c.push_back('!');
    write_all(c);
    EXPECT_NE(load_error().find("trailing"), std::string::npos);
    c = b;
    c[cs::file_header_size + 20] ^= 1;
    write_all(c);
    EXPECT_NE(load_error().find("checksum"), std::string::npos);
}

TEST_F(checkpoint, missing_file_is_a_clear_error) {
    EXPECT_NE(load_error().find("cannot open"), std::string::npos);
}

TEST_F(checkpoint, a_write_error_is_reported_and_keeps_the_previous_file) {
    // The file size limit makes write(2) fail with EFBIG part way through a 1.6 MB save (a
    // full disk behaves the same): the save throws naming the problem, PATH.tmp is removed and
    // the earlier checkpoint still loads.
    state before = sample();
    before.title = "earlier";
    cs::save_to_file(path, before);
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 256 * 1024;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    state big = sample();
    big.field.assign(200000, 1.5);
    std::string error;
    try {
        cs::save_to_file(path, big);
    } catch (cs::serialization_error const& e) {
        error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_NE(error.find("write failed"), std::string::npos) << error;
    EXPECT_FALSE(fs::exists(fs::path(path.string() + ".tmp")));
    state back;
    cs::load_from_file(path, back);
    EXPECT_EQ(back, before);
}

TEST_F(checkpoint, in_place_and_durable_saves_round_trip) {
    for (cs::checkpoint_options how :
         {cs::checkpoint_options{false, false}, cs::checkpoint_options{true, true},
          cs::checkpoint_options{false, true}}) {
        state s = sample();
        s.title = how.atomic ? "atomic" : "in place";
        cs::save_to_file(path, how, cs::default_options(), s);
        EXPECT_FALSE(fs::exists(fs::path(path.string() + ".tmp")));
        state back;
        cs::load_from_file(path, back);
        EXPECT_EQ(back, s);
    }
}

namespace {
struct throws_on_save {
    template <class A>
    void serialize(A&, unsigned) {
        throw std::runtime_error("disk on fire");
    }
};
} // namespace

TEST_F(checkpoint, a_failed_in_place_save_leaves_a_file_that_refuses_to_load) {
    // In place there is no earlier checkpoint to keep; what is left must not load as data.
    cs::save_to_file(path, sample());
    EXPECT_THROW(cs::save_to_file(path, cs::checkpoint_options{false, false}, cs::default_options(),
                                  sample(), throws_on_save{}),
                 std::runtime_error);
    EXPECT_NE(load_error().find("bad magic"), std::string::npos) << load_error();
}
