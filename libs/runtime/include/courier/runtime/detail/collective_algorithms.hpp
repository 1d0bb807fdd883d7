// SPDX-License-Identifier: BSL-1.0
// The algorithms of the collectives (courier/runtime/collectives.hpp), each in O(log P) rounds
// of round_trip messages, for any number of localities P.
#pragma once

#include <courier/runtime/detail/collective_mailbox.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace courier::collectives::detail {

/// Rounds `first`, `first + 1`, ... (at most log2 P + 2 of them).
template <class T, class Op>
T all_reduce(round_trip const& c, T value, Op& op, std::uint32_t first = 0) {
    std::uint32_t const p = c.size(), r = c.rank();
    if (p == 1) {
        return value;
    }
    std::uint32_t const pof2 = std::bit_floor(p);
    std::uint32_t const rem = p - pof2;
    // Fold: below 2*rem, each even locality gives its value to the odd one above it and waits
    // for the result, which comes after the log2(pof2) rounds of recursive doubling.
    std::uint32_t const last_step = first + 1 + static_cast<std::uint32_t>(std::countr_zero(pof2));
    if (r < 2 * rem && r % 2 == 0) {
        c.send(r + 1, first, std::move(value));
        return c.receive<T>(r + 1, last_step);
    }
    T acc = std::move(value);
    std::uint32_t newrank = r < 2 * rem ? r / 2 : r - rem;
    if (r < 2 * rem) {
        acc = op(c.receive<T>(r - 1, first), std::move(acc));
    }
    lent l; // acc goes to the partner by address, unchanged until it has copied it
    std::uint32_t step = first + 1;
    for (std::uint32_t mask = 1; mask < pof2; mask <<= 1, ++step) {
        std::uint32_t partner_new = newrank ^ mask;
        std::uint32_t partner = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
        c.lend(partner, step, acc, l);
        T other = c.receive<T>(partner, step);
        l.wait();
        acc = partner_new < newrank ? op(std::move(other), std::move(acc))
                                    : op(std::move(acc), std::move(other));
    }
    if (r < 2 * rem) {
        c.lend(r - 1, last_step, acc, l);
        l.wait();
    }
    return acc;
}

/// Vectors of at least this many bytes are reduced element by element with a reduce-scatter
/// and an all-gather; smaller ones by recursive doubling over whole vectors.
inline constexpr std::size_t elementwise_split_min = 4096;

/// all_reduce with `op` applied to the elements of vectors: result[i] = v_0[i] op ... op
/// v_(P-1)[i], contributions combined in rank order.
///
/// The localities beyond the largest power of two fold into a partner first. Then, in the
/// rounds of recursive doubling (partner newrank ^ mask, mask = 1, 2, ...), each locality
/// sends its partner the range of lengths it has seen ({min, ~max}, 16 bytes) beside its data:
/// a small vector whole (recursive doubling), a large one half of the blocks it holds
/// (Rabenseifner's reduce-scatter by recursive halving). Every locality sends the same messages
/// whatever its length, and a block of another length is not combined, so after these rounds
/// every locality knows every length and none waits for a message that does not come: if the
/// lengths differ, all throw std::invalid_argument alike (the folded ones learn it from their
/// partner). Otherwise a large vector is gathered back in the same rounds in reverse (recursive
/// doubling of the blocks). Each locality then combines (P-1)/P of the elements and receives
/// 2 (P-1)/P of them, where whole vectors cost log2 P of each.
template <class U, class Op>
std::vector<U> all_reduce_elementwise(round_trip const& c, std::vector<U> value, Op& op) {
    std::uint32_t const p = c.size(), r = c.rank();
    if (p == 1) {
        return value;
    }
    using range_t = std::vector<std::uint64_t>; // {min length, ~max length}
    std::uint64_t const n = value.size();
    range_t range{n, ~n};
    auto merge = [&range](range_t const& other) {
        if (other.size() != 2) {
            throw std::runtime_error("courier: all_reduce: a bad length message");
        }
        range[0] = std::min(range[0], other[0]);
        range[1] = std::min(range[1], other[1]);
    };
    auto mismatch = [&range] {
        return std::invalid_argument(
            "courier: all_reduce with an elementwise operation needs vectors of one length on "
            "every locality; they have " +
            std::to_string(range[0]) + " to " + std::to_string(~range[1]) + " elements");
    };
    // acc[at + i] = op over acc[at + i] and other[i], the other's contribution first if
    // other_first (indices, not pointers: std::vector<bool> has no data()).
    auto combine = [&op](std::vector<U>& acc, std::size_t at, std::vector<U>& other,
                         bool other_first) {
        // Two loops, not a choice per element: the loop stays one the compiler can vectorize.
        if (other_first) {
            for (std::size_t i = 0; i < other.size(); ++i) {
                acc[at + i] = op(std::move(other[i]), std::move(acc[at + i]));
            }
        } else {
            for (std::size_t i = 0; i < other.size(); ++i) {
                acc[at + i] = op(std::move(acc[at + i]), std::move(other[i]));
            }
        }
    };
    std::uint32_t const pof2 = std::bit_floor(p);
    std::uint32_t const rem = p - pof2;
    std::uint32_t const log = static_cast<std::uint32_t>(std::countr_zero(pof2));
    // Rounds: 0-1 the fold; 2 + 2k, 3 + 2k the lengths and data of doubling round k; then the
    // gather's rounds; last the lengths and the result back to a folded locality.
    std::uint32_t const last = 4 + 4 * log;
    lent l;
    if (r < 2 * rem && r % 2 == 0) {
        c.send(r + 1, 0, range);
        c.lend(r + 1, 1, value, l);
        merge(c.receive<range_t>(r + 1, last));
        if (range[0] != ~range[1]) {
            l.wait();
            throw mismatch();
        }
        auto result = c.receive<std::vector<U>>(r + 1, last + 1);
        l.wait();
        if (result.size() != n) {
            throw std::runtime_error("courier: all_reduce: the result has " +
                                     std::to_string(result.size()) + " elements, not " +
                                     std::to_string(n));
        }
        return result;
    }
    std::vector<U> acc = std::move(value);
    if (r < 2 * rem) {
        merge(c.receive<range_t>(r - 1, 0));
        auto lower = c.receive<std::vector<U>>(r - 1, 1);
        if (lower.size() == n) {
            combine(acc, 0, lower, true);
        }
    }
    std::uint32_t const newrank = r < 2 * rem ? r / 2 : r - rem;
    auto real = [&](std::uint32_t nr) { return nr < rem ? nr * 2 + 1 : nr + rem; };
    bool split = n * sizeof(U) >= elementwise_split_min && n >= pof2;
    if constexpr (std::is_same_v<U, bool>) {
        split = false; // std::vector<bool> has no contiguous elements to lend
    }
    // Block b of pof2 holds elements [at(b), at(b + 1)).
    std::uint64_t const base = n / pof2, extra = n % pof2;
    auto at = [&](std::uint32_t b) { return b * base + std::min<std::uint64_t>(b, extra); };
    auto part = [&](std::uint32_t lo, std::uint32_t hi) {
        if constexpr (std::is_same_v<U, bool>) {
            return std::span<U const>();
        } else {
            return std::span<U const>(acc.data() + at(lo), at(hi) - at(lo));
        }
    };
    std::uint32_t lo = 0, hi = pof2; // the blocks held (split)
    std::uint32_t step = 2;
    for (std::uint32_t mask = 1; mask < pof2; mask <<= 1, step += 2) {
        std::uint32_t const partner = real(newrank ^ mask);
        bool const other_first = (newrank ^ mask) < newrank;
        c.send(partner, step, range);
        if (!split) {
            c.lend(partner, step + 1, acc, l);
            merge(c.receive<range_t>(partner, step));
            auto other = c.receive<std::vector<U>>(partner, step + 1);
            l.wait(); // acc changes now
            if (other.size() == n) {
                combine(acc, 0, other, other_first);
            }
            continue;
        }
        // Halve the blocks held: keep the half this locality's bit of `mask` names, lend the
        // other (not changed until the gather, after l.wait()).
        std::uint32_t const mid = lo + (hi - lo) / 2;
        bool const keep_low = (newrank & mask) == 0;
        std::uint32_t const klo = keep_low ? lo : mid, khi = keep_low ? mid : hi;
        c.lend_span(partner, step + 1, keep_low ? part(mid, hi) : part(lo, mid), l);
        merge(c.receive<range_t>(partner, step));
        auto other = c.receive<std::vector<U>>(partner, step + 1);
        if (other.size() == at(khi) - at(klo)) {
            combine(acc, at(klo), other, other_first);
        }
        lo = klo;
        hi = khi;
    }
    l.wait();
    bool const agreed = range[0] == ~range[1];
    if (agreed && split) {
        // Gather: the same partners in reverse; each round doubles the blocks held.
        for (std::uint32_t mask = pof2 >> 1; mask > 0; mask >>= 1, step += 2) {
            std::uint32_t const partner = real(newrank ^ mask);
            std::uint32_t const width = hi - lo;
            std::uint32_t const plo = (newrank & mask) == 0 ? lo : lo - width;
            std::uint32_t const olo = (newrank & mask) == 0 ? hi : plo;
            c.lend_span(partner, step, part(lo, hi), l);
            auto other = c.receive<std::vector<U>>(partner, step);
            if (other.size() != at(olo + width) - at(olo)) {
                throw std::runtime_error("courier: all_reduce: a round brought " +
                                         std::to_string(other.size()) + " elements");
            }
            std::move(other.begin(), other.end(),
                      acc.begin() + static_cast<std::ptrdiff_t>(at(olo)));
            l.wait();
            lo = plo;
            hi = plo + 2 * width;
        }
    }
    if (r < 2 * rem) {
        c.send(r - 1, last, range);
        if (agreed) {
            c.lend(r - 1, last + 1, acc, l);
            l.wait();
        }
    }
    if (!agreed) {
        throw mismatch();
    }
    return acc;
}

template <class T>
T broadcast(round_trip const& c, T value, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    std::uint32_t mask = 1;
    while (mask < p) {
        if ((vr & mask) != 0) {
            value = c.receive<T>((vr - mask + root) % p, 0);
            break;
        }
        mask <<= 1;
    }
    lent l;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < p) {
            c.lend((vr + mask + root) % p, 0, value, l);
        }
    }
    l.wait();
    return value;
}

template <class T, class Op>
T reduce(round_trip const& c, T value, Op& op, std::uint32_t root) {
    std::uint32_t const p = c.size(), r = c.rank();
    // A binomial tree towards locality 0 (contiguous ranks: the order of op is kept), then to
    // the root.
    for (std::uint32_t mask = 1; mask < p; mask <<= 1) {
        if ((r & mask) != 0) {
            c.send(r & ~mask, 0, std::move(value));
            value = T{};
            break;
        }
        if ((r | mask) < p) {
            value = op(std::move(value), c.receive<T>(r | mask, 0));
        }
    }
    if (root != 0) {
        if (r == 0) {
            c.send(root, 1, std::move(value));
            value = T{};
        } else if (r == root) {
            value = c.receive<T>(0, 1);
        }
    }
    return value;
}

template <class T>
std::vector<T> gather(round_trip const& c, T value, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    // block[i]: the value of virtual rank vr + i, for the subtree under vr.
    std::vector<T> block;
    block.push_back(std::move(value));
    for (std::uint32_t mask = 1; mask < p; mask <<= 1) {
        if ((vr & mask) != 0) {
            c.send(((vr & ~mask) + root) % p, 0, std::move(block));
            return {};
        }
        if ((vr | mask) < p) {
            auto more = c.receive<std::vector<T>>(((vr | mask) + root) % p, 0);
            if (more.size() != std::min(mask, p - (vr | mask))) {
                throw std::runtime_error("courier: gather: a subtree sent " +
                                         std::to_string(more.size()) + " values");
            }
            for (auto& v : more) {
                block.push_back(std::move(v));
            }
        }
    }
    std::vector<T> result(p);
    for (std::uint32_t i = 0; i < p; ++i) {
        result[(i + root) % p] = std::move(block[i]);
    }
    return result;
}

template <class T>
T scatter(round_trip const& c, std::vector<T> values, std::uint32_t root) {
    std::uint32_t const p = c.size();
    std::uint32_t const vr = (c.rank() + p - root) % p;
    std::vector<T> block; // the values of virtual ranks vr, vr + 1, ... of this subtree
    std::uint32_t mask = 1;
    if (vr == 0) {
        if (values.size() != p) {
            throw std::invalid_argument("courier: scatter needs one value per locality, got " +
                                        std::to_string(values.size()));
        }
        block.resize(p);
        for (std::uint32_t i = 0; i < p; ++i) {
            block[i] = std::move(values[(i + root) % p]);
        }
        mask = std::bit_ceil(p);
    } else {
        mask = vr & (~vr + 1); // the lowest bit set: vr's parent is vr - mask
        block = c.receive<std::vector<T>>((vr - mask + root) % p, 0);
        if (block.size() != std::min(mask, p - vr)) {
            throw std::runtime_error("courier: scatter: received " + std::to_string(block.size()) +
                                     " values for a subtree");
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < p) {
            std::uint32_t n = std::min(mask, p - vr - mask);
            std::vector<T> part(std::make_move_iterator(block.begin() + mask),
                                std::make_move_iterator(block.begin() + mask + n));
            c.send((vr + mask + root) % p, 0, std::move(part));
        }
    }
    return std::move(block[0]);
}

/// `mine`: this locality's value, lent to the other localities by address (unchanged until
/// all_gather returns); the result holds `*own` (moved) if given, else a copy of `mine`.
template <class T>
std::vector<T> all_gather(round_trip const& c, T const& mine, T* own) {
    std::uint32_t const p = c.size(), r = c.rank();
    std::vector<T> got; // got[j - 1]: the value of locality (r + j) % p
    got.reserve(p - 1); // never moved: each round lends what came before
    auto at = [&](std::size_t j) -> T const& { return j == 0 ? mine : got[j - 1]; };
    lent l;
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        std::uint32_t n = std::min(dist, p - dist);
        c.template lend_each<T>((r + p - dist) % p, step, n, at, l);
        auto more = c.receive<std::vector<T>>((r + dist) % p, step);
        if (more.size() != n) {
            throw std::runtime_error("courier: all_gather: a round brought " +
                                     std::to_string(more.size()) + " values");
        }
        for (auto& v : more) {
            got.push_back(std::move(v));
        }
    }
    l.wait();
    std::vector<T> result(p);
    if (own != nullptr) {
        result[r] = std::move(*own);
    } else {
        result[r] = mine;
    }
    for (std::uint32_t j = 1; j < p; ++j) {
        result[(r + j) % p] = std::move(got[j - 1]);
    }
    return result;
}

template <class T>
std::vector<T> all_to_all(round_trip const& c, std::vector<T> values) {
    std::uint32_t const p = c.size(), r = c.rank();
    if (values.size() != p) {
        throw std::invalid_argument("courier: all_to_all needs one value per locality, got " +
                                    std::to_string(values.size()));
    }
    // tmp[i]: the value travelling i localities forward; in round k the values whose index has
    // bit k set move 2^k further. At the end tmp[i] came from locality r - i.
    std::vector<T> tmp(p);
    for (std::uint32_t i = 0; i < p; ++i) {
        tmp[i] = std::move(values[(r + i) % p]);
    }
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        std::vector<T> out;
        for (std::uint32_t i = dist; i < p; ++i) {
            if ((i & dist) != 0) {
                out.push_back(std::move(tmp[i]));
            }
        }
        std::size_t n = out.size();
        c.send((r + dist) % p, step, std::move(out));
        auto in = c.receive<std::vector<T>>((r + p - dist) % p, step);
        if (in.size() != n) {
            throw std::runtime_error("courier: all_to_all: a round brought " +
                                     std::to_string(in.size()) + " values");
        }
        std::size_t next = 0;
        for (std::uint32_t i = dist; i < p; ++i) {
            if ((i & dist) != 0) {
                tmp[i] = std::move(in[next++]);
            }
        }
    }
    std::vector<T> result(p);
    for (std::uint32_t src = 0; src < p; ++src) {
        result[src] = std::move(tmp[(r + p - src) % p]);
    }
    return result;
}

/// The prefix over localities 0..r (inclusive), and over 0..r-1 (exclusive: empty on 0).
template <class T, class Op>
std::pair<T, std::optional<T>> scan(round_trip const& c, T value, Op& op) {
    std::uint32_t const p = c.size(), r = c.rank();
    T acc = std::move(value);
    lent l;
    std::optional<T> before;
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        if (r + dist < p) {
            c.lend(r + dist, step, acc, l);
        }
        if (r >= dist) {
            T other = c.receive<T>(r - dist, step);
            l.wait();
            before = before ? op(other, std::move(*before)) : other;
            acc = op(std::move(other), std::move(acc));
        }
    }
    l.wait();
    return {std::move(acc), std::move(before)};
}

inline void barrier(round_trip const& c) {
    std::uint32_t const p = c.size(), r = c.rank();
    std::uint32_t step = 0;
    for (std::uint32_t dist = 1; dist < p; dist <<= 1, ++step) {
        c.send((r + dist) % p, step, std::uint8_t{0});
        (void)c.receive<std::uint8_t>((r + p - dist) % p, step);
    }
}

} // namespace courier::collectives::detail
