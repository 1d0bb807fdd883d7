// SPDX-License-Identifier: BSL-1.0
#include "hosts.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace courier::run {

namespace {

bool valid_host_name(std::string const& h) {
    if (h.empty() || h.size() > 253 || h[0] == '-') {
        return false;
    }
    for (char c : h) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
            return false;
        }
    }
    return true;
}

long parse_slots(std::string const& text, std::string const& where) {
    long k = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
    if (ec != std::errc{} || end != text.data() + text.size() || k < 1 || k > 1 << 20) {
        throw usage_error(where + ": bad slot count '" + text + "' (expected a number >= 1)");
    }
    return k;
}

} // namespace

std::vector<host_entry> parse_host_list(std::string const& list) {
    std::vector<host_entry> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        host_entry e;
        auto colon = item.find(':');
        e.name = item.substr(0, colon);
        if (!valid_host_name(e.name)) {
            throw usage_error("--hosts: bad host name '" + item + "'");
        }
        if (colon != std::string::npos) {
            e.slots = parse_slots(item.substr(colon + 1), "--hosts: " + e.name);
        }
        out.push_back(std::move(e));
    }
    if (out.empty()) {
        throw usage_error("--hosts: no host given");
    }
    return out;
}

std::vector<host_entry> parse_host_file(std::string const& path) {
    std::ifstream in(path);
    if (!in) {
        throw usage_error("--hostfile: cannot read '" + path + "'");
    }
    std::vector<host_entry> out;
    std::map<std::string, std::size_t> seen;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        std::string where = path + ":" + std::to_string(number);
        line = line.substr(0, line.find('#'));
        std::istringstream words(line);
        std::string word;
        if (!(words >> word)) {
            continue; // blank or comment
        }
        host_entry e;
        e.name = word;
        if (!valid_host_name(e.name)) {
            throw usage_error(where + ": bad host name '" + e.name + "'");
        }
        while (words >> word) {
            auto eq = word.find('=');
            std::string key = word.substr(0, eq);
            if (eq == std::string::npos || (key != "slots" && key != "max_slots")) {
                throw usage_error(where + ": unknown '" + word + "' (expected slots=K)");
            }
            long k = parse_slots(word.substr(eq + 1), where);
            if (key == "slots") {
                e.slots = k;
            }
        }
        if (e.slots == 0) {
            e.slots = 1; // as OpenMPI: a host without slots= has one
        }
        if (auto it = seen.find(e.name); it != seen.end()) {
            out[it->second].slots += e.slots; // a host listed twice: its slots add up
            continue;
        }
        seen[e.name] = out.size();
        out.push_back(std::move(e));
    }
    if (out.empty()) {
        throw usage_error("--hostfile: '" + path + "' names no host");
    }
    return out;
}

std::vector<std::string> place(std::vector<host_entry> const& hosts, long n) {
    std::vector<std::string> by_rank;
    bool counted = false;
    long total = 0;
    for (auto const& h : hosts) {
        counted = counted || h.slots > 0;
        total += std::max(h.slots, 1L); // with slots given elsewhere, a bare host has one
    }
    if (!counted) {
        auto h = static_cast<long>(hosts.size());
        for (long i = 0; i < h; ++i) {
            long here = n / h + (i < n % h ? 1 : 0);
            by_rank.insert(by_rank.end(), static_cast<std::size_t>(here),
                           hosts[static_cast<std::size_t>(i)].name);
        }
        return by_rank;
    }
    if (total < n) {
        throw usage_error("the hosts give " + std::to_string(total) + " slots for " +
                          std::to_string(n) + " localities");
    }
    for (auto const& h : hosts) {
        long k = std::max(h.slots, 1L);
        for (long i = 0; i < k && static_cast<long>(by_rank.size()) < n; ++i) {
            by_rank.push_back(h.name);
        }
    }
    return by_rank;
}

std::string shell_quote(std::string const& word) {
    std::string q = "'";
    for (char c : word) {
        if (c == '\'') {
            q += "'\\''";
        } else {
            q += c;
        }
    }
    return q + "'";
}

} // namespace courier::run
