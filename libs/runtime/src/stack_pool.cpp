// SPDX-License-Identifier: BSL-1.0
#include "stack_pool.hpp"

#include "sanitizer_fibers.hpp"

#include <courier/common/signals.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace courier::detail {

namespace {
thread_local void* tl_alt_stack = nullptr;
constexpr std::size_t alt_stack_size = 64 * 1024;
char g_overflow_message[256];
std::size_t g_overflow_message_len = 0;
struct sigaction g_previous_segv;
bool g_handler_installed = false;
std::mutex g_handler_mutex;

void on_segv(int sig, siginfo_t* info, void* context) {
    auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    if (in_guard_page_of_current_thread(addr)) {
        ssize_t ignored = ::write(2, g_overflow_message, g_overflow_message_len);
        (void)ignored;
        ::abort();
    }
    // Not ours: hand over to whatever was installed before (default: core dump).
    signals::chain(g_previous_segv, sig, info, context);
}
} // namespace

stack_pool::stack_pool(std::size_t usable_size)
    : usable_(usable_size), guard_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))) {
    usable_ = (usable_ + guard_ - 1) / guard_ * guard_;
}

stack_pool::~stack_pool() {
    for (auto [p, n] : slabs_) {
        // Only the usable parts: the guard pages cannot be touched (nor were they poisoned).
        for (std::size_t off = 0; off < n; off += total_size()) {
            sanitizer::forget_stack(static_cast<char*>(p) + off + guard_, usable_);
        }
        ::munmap(p, n);
    }
}

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

void stack_pool::map_slab() {
    std::size_t n = slab_stacks * total_size();
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
        throw std::bad_alloc();
    }
    auto* base = static_cast<char*>(p);
    for (std::size_t i = 0; i < slab_stacks; ++i) {
        char* stack = base + i * total_size();
        bool ok = false;
        if (light_guards_) {
            ok = ::madvise(stack, guard_, MADV_GUARD_INSTALL) == 0;
            if (!ok && i == 0) {
                light_guards_ = false; // kernel without guard regions: mprotect from now on
            }
        }
        if (!ok && ::mprotect(stack, guard_, PROT_NONE) != 0) {
            ::munmap(p, n);
            throw std::bad_alloc();
        }
    }
    slabs_.emplace_back(p, n);
    for (std::size_t i = slab_stacks; i-- > 0;) {
        shared_.push_back(base + i * total_size());
    }
    mapped_ += slab_stacks;
}

void* stack_pool::take(std::vector<void*>* cache) {
    if (cache != nullptr && !cache->empty()) {
        void* s = cache->back();
        cache->pop_back();
        return s;
    }
    std::lock_guard g(mutex_);
    if (shared_.empty()) {
        map_slab();
    }
    void* s = shared_.back();
    shared_.pop_back();
    return s;
}

void stack_pool::give(void* base, std::vector<void*>* cache) noexcept {
    if (cache != nullptr && cache->size() < cache_limit) {
        try {
            cache->push_back(base);
            return;
        } catch (...) {
        }
    }
    // Beyond the per-worker cache: keep the mapping (and its guard), return the pages.
    sanitizer::forget_stack(static_cast<char*>(base) + guard_, usable_);
    ::madvise(static_cast<char*>(base) + guard_, usable_, MADV_DONTNEED);
    std::lock_guard g(mutex_);
    try {
        shared_.push_back(base);
    } catch (...) {
    }
}

std::size_t stack_pool::mapped() const noexcept {
    std::lock_guard g(mutex_);
    return mapped_;
}

void install_overflow_handler(std::size_t usable_stack_size) {
    std::lock_guard g(g_handler_mutex);
    int n = std::snprintf(g_overflow_message, sizeof g_overflow_message,
                          "courier: stack overflow in a Courier thread (its stack is %zu KiB); "
                          "raise --courier:stack_size or move large data to the heap\n",
                          usable_stack_size / 1024);
    g_overflow_message_len = n > 0 ? static_cast<std::size_t>(n) : 0;
    if (g_handler_installed) {
        return;
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_previous_segv);
    g_handler_installed = true;
}

void enable_alt_signal_stack() {
    if (tl_alt_stack != nullptr) {
        return;
    }
    void* p =
        ::mmap(nullptr, alt_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return;
    }
    stack_t ss{};
    ss.ss_sp = p;
    ss.ss_size = alt_stack_size;
    if (::sigaltstack(&ss, nullptr) != 0) {
        ::munmap(p, alt_stack_size);
        return;
    }
    tl_alt_stack = p;
}

void disable_alt_signal_stack() {
    if (tl_alt_stack == nullptr) {
        return;
    }
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    ::sigaltstack(&ss, nullptr);
    sanitizer::forget_stack(tl_alt_stack, alt_stack_size);
    ::munmap(tl_alt_stack, alt_stack_size);
    tl_alt_stack = nullptr;
}

} // namespace courier::detail
