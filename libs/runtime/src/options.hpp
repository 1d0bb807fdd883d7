// SPDX-License-Identifier: BSL-1.0
// --courier:NAME=VALUE options with COURIER_NAME environment fallbacks. One table lists every
// option, its default and its help; anything else under --courier: is an error.
#pragma once

#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace courier::detail {

struct option_spec {
    std::string_view name;
    std::string_view default_value;
    std::string_view help;
};

/// Every option the runtime knows.
std::vector<option_spec> const& option_table();

class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct config {
    std::map<std::string, std::string, std::less<>> values; // every option, resolved
    std::vector<char*> rest;                                // argv without --courier: options
    bool help = false;

    std::string const& get(std::string_view name) const;
    long long get_int(std::string_view name, long long min, long long max) const;
    /// A size in bytes within [min, max]: an integer, optionally followed by K, M or G (binary
    /// multiples; also written KiB, MiB, GiB), in either case.
    long long get_bytes(std::string_view name, long long min, long long max) const;
    /// zero_copy_threshold and eager_threshold: a size (get_bytes), or "auto" (the default): the
    /// parcelport::default_eager_threshold() of `provider` (threshold_provider()).
    long long get_threshold(std::string_view name, long long min, long long max,
                            std::string_view provider) const;
    /// The value if it is one of `choices`; else throws "--courier:NAME=VALUE: expected A, B
    /// or C".
    std::string const& get_choice(std::string_view name,
                                  std::initializer_list<std::string_view> choices) const;
};

/// Command line first, then COURIER_NAME from the environment, then the default.
config parse_config(int argc, char** argv);
std::string help_text();

} // namespace courier::detail
