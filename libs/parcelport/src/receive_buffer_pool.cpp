// SPDX-License-Identifier: BSL-1.0
#include "receive_buffer_pool.hpp"

namespace courier::parcelport {

receive_buffer_pool::~receive_buffer_pool() {
    for (auto& list : free_) {
        for (std::byte* p : list) {
            delete[] p;
        }
    }
}

std::shared_ptr<std::byte[]> receive_buffer_pool::get(std::size_t n, bool& reused) {
    reused = false;
    unsigned shift = min_shift;
    while (shift <= max_shift && (std::size_t{1} << shift) < n) {
        ++shift;
    }
    if (n < (std::size_t{1} << min_shift) || shift > max_shift) {
        return std::shared_ptr<std::byte[]>(new std::byte[n == 0 ? 1 : n]);
    }
    std::byte* p = nullptr;
    {
        std::lock_guard g(mutex_);
        auto& list = free_[shift - min_shift];
        if (!list.empty()) {
            p = list.back();
            list.pop_back();
            cached_ -= std::size_t{1} << shift;
            reused = true;
        }
    }
    if (p == nullptr) {
        p = new std::byte[std::size_t{1} << shift];
    }
    return std::shared_ptr<std::byte[]>(
        p, [self = shared_from_this(), shift](std::byte* q) { self->put(q, shift); });
}

void receive_buffer_pool::put(std::byte* p, unsigned shift) noexcept {
    {
        std::lock_guard g(mutex_);
        if (cached_ + (std::size_t{1} << shift) <= limit_) {
            free_[shift - min_shift].push_back(p);
            cached_ += std::size_t{1} << shift;
            return;
        }
    }
    delete[] p;
}

} // namespace courier::parcelport
