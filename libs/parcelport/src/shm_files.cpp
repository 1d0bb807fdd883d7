// SPDX-License-Identifier: BSL-1.0
#include "shm_files.hpp"

#include <courier/common/signals.hpp>
#include <courier/parcelport/transport.hpp>

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string_view>

namespace courier::parcelport {

namespace {

// Endpoints, bells, outboxes and message rings of one process (four files per shm transport);
// tests open dozens of transports.
constexpr std::size_t slot_count = 256;
constexpr std::size_t path_size = 256;

// A slot's path is written while the slot is free and read only once it is in use. `owner`:
// the process that created the file (a forked child inherits the slots, not the files).
struct slot {
    std::atomic<bool> used{false};
    pid_t owner = 0;
    std::array<char, path_size> path{};
};
std::array<slot, slot_count> g_slots;
std::mutex g_slots_mutex; // own/forget; never taken by the removal

constexpr std::array<int, 8> ending_signals = {SIGHUP,  SIGINT,  SIGQUIT, SIGPIPE,
                                               SIGTERM, SIGABRT, SIGBUS,  SIGSEGV};
std::array<struct sigaction, NSIG> g_previous{};

void on_ending_signal(int sig, siginfo_t* info, void* context) {
    remove_shared_memory_files();
    signals::chain(g_previous[static_cast<std::size_t>(sig)], sig, info, context);
}

void install_handlers() noexcept {
    for (int sig : ending_signals) {
        struct sigaction& prev = g_previous[static_cast<std::size_t>(sig)];
        if (::sigaction(sig, nullptr, &prev) != 0 ||
            ((prev.sa_flags & SA_SIGINFO) == 0 && prev.sa_handler == SIG_IGN)) {
            continue; // an ignored signal ends nothing
        }
        struct sigaction act {};
        act.sa_sigaction = on_ending_signal;
        // On the alternate stack where a thread has one (a stack overflow's SIGSEGV);
        // restarted system calls if a handler before ours lets the process go on.
        act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&act.sa_mask);
        ::sigaction(sig, &act, nullptr);
    }
}

constexpr std::string_view directory = "/dev/shm/";
bool handlers_installed = false; // under g_slots_mutex

} // namespace

void remove_shared_memory_files() noexcept {
    pid_t me = ::getpid();
    for (auto& s : g_slots) {
        if (s.used.load(std::memory_order_acquire) && s.owner == me) {
            ::unlink(s.path.data());
        }
    }
}

void own_shared_memory_file(std::string const& name) noexcept {
    if (directory.size() + name.size() >= path_size) {
        return;
    }
    std::lock_guard lk(g_slots_mutex);
    if (!handlers_installed) {
        handlers_installed = true;
        install_handlers();
    }
    for (auto& s : g_slots) {
        if (!s.used.load(std::memory_order_relaxed)) {
            std::memcpy(s.path.data(), directory.data(), directory.size());
            std::memcpy(s.path.data() + directory.size(), name.c_str(), name.size() + 1);
            s.owner = ::getpid();
            s.used.store(true, std::memory_order_release);
            return;
        }
    }
}

void forget_shared_memory_file(std::string const& name) noexcept {
    std::lock_guard lk(g_slots_mutex);
    for (auto& s : g_slots) {
        std::string_view path(s.path.data());
        if (s.used.load(std::memory_order_relaxed) && path.starts_with(directory) &&
            path.substr(directory.size()) == name) {
            s.used.store(false, std::memory_order_release);
            return;
        }
    }
}

} // namespace courier::parcelport
