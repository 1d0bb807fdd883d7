// SPDX-License-Identifier: BSL-1.0
// courier-run's host placement: host lists, host files (OpenMPI's format) and the shell
// quoting of the agent's command line.
#include "../tools/hosts.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace courier::run;

namespace {
std::string write_file(std::string const& text) {
    std::string path = testing::TempDir() + "hosts_" + std::to_string(::getpid()) + "_" +
                       std::to_string(std::rand());
    std::ofstream(path) << text;
    return path;
}
} // namespace

TEST(hosts, a_list_without_slots_spreads_the_localities_evenly) {
    auto by_rank = place(parse_host_list("a,b"), 5);
    EXPECT_EQ(by_rank, (std::vector<std::string>{"a", "a", "a", "b", "b"}));
}

TEST(hosts, slots_fill_hosts_in_order) {
    auto by_rank = place(parse_host_list("a:1,b:3"), 3);
    EXPECT_EQ(by_rank, (std::vector<std::string>{"a", "b", "b"}));
}

TEST(hosts, too_few_slots_are_refused) {
    try {
        place(parse_host_list("a:1,b:1"), 3);
        FAIL() << "accepted";
    } catch (usage_error const& e) {
        EXPECT_STREQ(e.what(), "the hosts give 2 slots for 3 localities");
    }
}

TEST(hosts, bad_names_and_counts_are_refused) {
    EXPECT_THROW(parse_host_list(""), usage_error);
    EXPECT_THROW(parse_host_list("a,,b"), usage_error);
    EXPECT_THROW(parse_host_list("a:0"), usage_error);
    EXPECT_THROW(parse_host_list("a:x"), usage_error);
    EXPECT_THROW(parse_host_list("a b"), usage_error);
    EXPECT_THROW(parse_host_list("-oProxyCommand=x"), usage_error); // never an ssh option
}

TEST(hosts, a_host_file_in_openmpis_format) {
    auto path = write_file("# cluster\n\nnode1 slots=2\nnode2   # one slot\nnode1 slots=1\n"
                           "node3 slots=4 max_slots=8\n");
    auto hosts = parse_host_file(path);
    ASSERT_EQ(hosts.size(), 3u);
    EXPECT_EQ(hosts[0].name, "node1");
    EXPECT_EQ(hosts[0].slots, 3); // listed twice: the slots add up
    EXPECT_EQ(hosts[1].slots, 1);
    EXPECT_EQ(hosts[2].slots, 4);
    std::remove(path.c_str());
}

TEST(hosts, a_typo_in_a_host_file_names_the_file_and_line) {
    auto path = write_file("node1 slots=2\nnode2 slot=2\n");
    try {
        parse_host_file(path);
        FAIL() << "accepted";
    } catch (usage_error const& e) {
        EXPECT_EQ(std::string(e.what()), path + ":2: unknown 'slot=2' (expected slots=K)");
    }
    std::remove(path.c_str());
    EXPECT_THROW(parse_host_file(path), usage_error); // gone: cannot read
    auto empty = write_file("# nothing\n");
    EXPECT_THROW(parse_host_file(empty), usage_error);
    std::remove(empty.c_str());
}

TEST(hosts, shell_quoting_survives_a_shell) {
    std::string tricky = "it's $HOME `x` \"q\" \\ ;|&";
    std::string cmd = "printf %s " + shell_quote(tricky);
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[256] = {};
    std::size_t n = std::fread(buf, 1, sizeof buf - 1, p);
    ::pclose(p);
    EXPECT_EQ(std::string(buf, n), tricky);
}
