// SPDX-License-Identifier: BSL-1.0
// Stacks for Courier threads: mapped in slabs of many stacks, each with a guard page below it,
// recycled through a per-worker cache (no lock) and a shared list. Guards are installed with
// MADV_GUARD_INSTALL where the kernel has it (Linux 6.13+: no extra VMA, so a slab is one
// mapping and vm.max_map_count does not cap the number of suspended threads), else with
// mprotect(PROT_NONE) (two VMAs per stack: about 32k stacks with the default map count).
// A stack overflow faults on the guard page; the SIGSEGV handler (on an alternate signal stack)
// recognizes the address and dies with a message naming --courier:stack_size.
#pragma once

#include <boost/context/stack_context.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace courier::detail {

class stack_pool {
public:
    explicit stack_pool(std::size_t usable_size);
    ~stack_pool();
    stack_pool(stack_pool const&) = delete;
    stack_pool& operator=(stack_pool const&) = delete;

    /// Returns the base (lowest address, the guard page) of a stack.
    void* take(std::vector<void*>* cache);
    void give(void* base, std::vector<void*>* cache) noexcept;
    std::size_t usable_size() const noexcept { return usable_; }
    std::size_t total_size() const noexcept { return usable_ + guard_; }
    std::size_t guard_size() const noexcept { return guard_; }
    /// Stacks currently mapped (in use or cached).
    std::size_t mapped() const noexcept;
    /// Whether guards use MADV_GUARD_INSTALL (else mprotect).
    bool light_guards() const noexcept { return light_guards_; }

private:
    void map_slab(); // with mutex_ held
    std::size_t usable_;
    std::size_t guard_;
    mutable std::mutex mutex_;
    std::vector<void*> shared_;
    std::vector<std::pair<void*, std::size_t>> slabs_;
    std::size_t mapped_ = 0;
    bool light_guards_ = true;
    static constexpr std::size_t cache_limit = 512;
    static constexpr std::size_t slab_stacks = 64;
};

/// Installs the SIGSEGV handler that reports guard-page hits (idempotent).
void install_overflow_handler(std::size_t usable_stack_size);
/// Per OS thread: an alternate signal stack, so the handler runs after a stack overflow.
void enable_alt_signal_stack();
void disable_alt_signal_stack();
/// Whether `addr` lies in the guard page of the Courier thread running on this OS thread
/// (async-signal-safe; defined by the scheduler).
bool in_guard_page_of_current_thread(std::uintptr_t addr) noexcept;

} // namespace courier::detail
