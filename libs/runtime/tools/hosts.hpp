// SPDX-License-Identifier: BSL-1.0
// courier-run's placement of localities on hosts: --hosts=a,b[:K] and --hostfile=FILE
// (OpenMPI's format: "host slots=K" a line, '#' comments), and shell quoting for the agent.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace courier::run {

struct host_entry {
    std::string name;
    long slots = 0; // 0: not given
};

class usage_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// "a,b:2,c" -> entries (slots 0 where not given). Throws usage_error naming the bad entry.
std::vector<host_entry> parse_host_list(std::string const& list);
/// The host file's entries. Throws usage_error naming the file, line and problem.
std::vector<host_entry> parse_host_file(std::string const& path);

/// One host per locality, by rank. Entries with slots are filled in order (as OpenMPI places
/// by slot); when no entry gives slots, the localities are spread evenly, consecutive ranks on
/// one host. Throws usage_error when the slots are fewer than n.
std::vector<std::string> place(std::vector<host_entry> const& hosts, long n);

/// `word` quoted for a POSIX shell (the agent's remote shell joins and re-splits words).
std::string shell_quote(std::string const& word);

} // namespace courier::run
