// SPDX-License-Identifier: BSL-1.0
// The breadth-first queue of deep-copy nodes that both archives drive (defer_node): the
// outermost push visits every queued node in order, including nodes queued by those visits,
// then empties the queue, also when a visit throws. "Draining" is simply "the queue is not
// empty", so nothing else needs tracking.
#pragma once

#include <cstddef>
#include <vector>

namespace courier::serialization::detail {

template <class Node>
class node_queue {
public:
    template <class Visit>
    void push(Node n, Visit&& visit) {
        bool outermost = nodes_.empty();
        nodes_.push_back(n);
        if (!outermost) {
            return;
        }
        struct clear_on_exit {
            std::vector<Node>& v;
            ~clear_on_exit() { v.clear(); }
        } guard{nodes_};
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            Node next = nodes_[i]; // a copy: visits push, which may reallocate
            visit(next);
        }
    }

private:
    std::vector<Node> nodes_;
};

} // namespace courier::serialization::detail
