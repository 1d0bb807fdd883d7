// SPDX-License-Identifier: BSL-1.0
// A registrar for tests: hands out increasing keys and remembers what is registered.
#pragma once

#include <courier/rma/registrar.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>

namespace courier::rma::testing {

class counting_registrar final : public memory_registrar {
public:
    explicit counting_registrar(bool va = true) : va_(va) {}
    registration register_memory(void* base, std::size_t bytes) override {
        std::lock_guard g(mutex_);
        if (fail_) {
            throw std::runtime_error("counting_registrar: told to fail");
        }
        registration r;
        r.key = ++next_;
        r.handle = base;
        live_[r.key] = bytes;
        ++registered_;
        return r;
    }
    void deregister_memory(registration const& r) noexcept override {
        std::lock_guard g(mutex_);
        live_.erase(r.key);
        ++deregistered_;
    }
    bool resolves_addresses_at_access() const noexcept override { return va_; }
    char const* name() const noexcept override { return "counting"; }

    std::size_t live() const {
        std::lock_guard g(mutex_);
        return live_.size();
    }
    bool is_live(std::uint64_t key) const {
        std::lock_guard g(mutex_);
        return live_.count(key) != 0;
    }
    std::uint64_t registered() const {
        std::lock_guard g(mutex_);
        return registered_;
    }
    std::uint64_t deregistered() const {
        std::lock_guard g(mutex_);
        return deregistered_;
    }
    void fail(bool f) {
        std::lock_guard g(mutex_);
        fail_ = f;
    }

private:
    bool va_;
    mutable std::mutex mutex_;
    std::map<std::uint64_t, std::size_t> live_;
    std::uint64_t next_ = 0, registered_ = 0, deregistered_ = 0;
    bool fail_ = false;
};

} // namespace courier::rma::testing
