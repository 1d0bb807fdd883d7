// SPDX-License-Identifier: BSL-1.0
// MEL's deep-copy benchmarks (seed 000, Figures 7-10) with Courier: a binary tree, a ring
// (doubly linked), a random graph and a complete graph of nodes holding a list of pointers,
// plus binary trees whose nodes carry a payload array (512 B or 8 KiB) to tell the modes apart.
// For n = 4^0 ... 2^16 nodes (complete graphs to 2^11), each case in the same run:
//   courier-buffered / courier-non_buffered / courier-adaptive  (deep_copy_options)
//   hand-coded   a serializer written for this node type (BFS numbering in a std::unordered_map,
//                flat buffer, iterative)
//   boost        Boost.Serialization 1.74 binary archives, tracked raw pointers
// (a) memory: serialize + deserialize; (b) file: write a checkpoint + read it back (Courier
//     also in place, as the baselines write, besides its default tmp file + rename);
// (c) remote (under courier-run -n 2): send to locality 1, which deserializes, serializes the
//     copy back, and the caller deserializes it. Freeing the copies is not timed.
//   deep_copy_bench [--quick] [--max-log2=N] [--cases=memory,file,remote]
//                   [--structures=tree,ring,random,complete,tree+512B,tree+8KiB]
// Output: RESULT <case> <structure> <n> <implementation> <microseconds>, then ratio tables.
#include <courier/courier.hpp>

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/array_wrapper.hpp>
#include <boost/serialization/split_free.hpp>
#include <boost/serialization/vector.hpp>

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace cs = courier::serialization;

struct bnode {
    std::int32_t value = 0;
    std::vector<bnode*> edges;
    double* data = nullptr;
    std::uint32_t len = 0;
    bnode() = default;
    bnode(bnode const&) = delete;
    bnode& operator=(bnode const&) = delete;
    ~bnode() { delete[] data; }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& value& cs::shared(edges) & cs::array(data, len);
    }
};

namespace boost::serialization {
template <class A>
void save(A& ar, bnode const& n, unsigned) {
    ar << n.value << n.edges << n.len;
    if (n.len != 0) {
        ar << boost::serialization::make_array(n.data, n.len);
    }
}
template <class A>
void load(A& ar, bnode& n, unsigned) {
    ar >> n.value >> n.edges >> n.len;
    if (n.len != 0) {
        n.data = new double[n.len];
        ar >> boost::serialization::make_array(n.data, n.len);
    }
}
template <class A>
void serialize(A& ar, bnode& n, unsigned v) {
    split_free(ar, n, v);
}
} // namespace boost::serialization

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<bnode*> all_nodes(bnode* root) {
    std::vector<bnode*> order;
    if (root == nullptr) {
        return order;
    }
    std::unordered_map<bnode*, bool> seen;
    order.push_back(root);
    seen[root] = true;
    for (std::size_t i = 0; i < order.size(); ++i) {
        for (bnode* e : order[i]->edges) {
            if (e != nullptr && seen.emplace(e, true).second) {
                order.push_back(e);
            }
        }
    }
    return order;
}

void free_graph(bnode* root) {
    for (bnode* n : all_nodes(root)) {
        delete n;
    }
}

// ---- the structures ----------------------------------------------------------------------

std::vector<bnode*> make_nodes(std::size_t n, std::uint32_t payload) {
    std::vector<bnode*> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = new bnode;
        v[i]->value = static_cast<std::int32_t>(i);
        if (payload != 0) {
            v[i]->len = payload;
            v[i]->data = new double[payload];
            std::fill_n(v[i]->data, payload, double(i));
        }
    }
    return v;
}

bnode* make_structure(std::string const& kind, std::size_t n) {
    std::uint32_t payload = kind == "tree+512B" ? 64 : kind == "tree+8KiB" ? 1024 : 0;
    auto v = make_nodes(n, payload);
    if (kind.rfind("tree", 0) == 0) {
        for (std::size_t i = 0; i < n; ++i) {
            for (std::size_t c : {2 * i + 1, 2 * i + 2}) {
                if (c < n) {
                    v[i]->edges.push_back(v[c]);
                }
            }
        }
    } else if (kind == "ring") {
        for (std::size_t i = 0; i < n; ++i) {
            v[i]->edges = {v[(i + n - 1) % n], v[(i + 1) % n]};
        }
    } else if (kind == "random") {
        std::mt19937 rng(42);
        for (std::size_t i = 0; i < n; ++i) {
            std::size_t k = 1 + rng() % 8;
            for (std::size_t e = 0; e < k; ++e) {
                v[i]->edges.push_back(v[rng() % n]);
            }
            if (i + 1 < n) {
                v[i]->edges.push_back(v[i + 1]); // everything reachable from the root
            }
        }
    } else if (kind == "complete") {
        for (std::size_t i = 0; i < n; ++i) {
            v[i]->edges = v;
        }
    }
    return v[0];
}

// ---- hand-coded serializer ----------------------------------------------------------------

template <class T>
void put(std::vector<char>& out, T const& v) {
    auto at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void hand_save(bnode* root, std::vector<char>& out) {
    out.clear();
    std::unordered_map<bnode*, std::uint32_t> id;
    std::vector<bnode*> order{root};
    id.emplace(root, 0);
    for (std::size_t i = 0; i < order.size(); ++i) {
        for (bnode* e : order[i]->edges) {
            if (id.emplace(e, static_cast<std::uint32_t>(order.size())).second) {
                order.push_back(e);
            }
        }
    }
    put(out, static_cast<std::uint32_t>(order.size()));
    for (bnode* n : order) {
        put(out, n->value);
        put(out, static_cast<std::uint32_t>(n->edges.size()));
        for (bnode* e : n->edges) {
            put(out, id[e]);
        }
        put(out, n->len);
        auto at = out.size();
        out.resize(at + n->len * sizeof(double));
        if (n->len != 0) {
            std::memcpy(out.data() + at, n->data, n->len * sizeof(double));
        }
    }
}

bnode* hand_load(char const* p) {
    auto get = [&p](auto& v) {
        std::memcpy(&v, p, sizeof v);
        p += sizeof v;
    };
    std::uint32_t count = 0;
    get(count);
    std::vector<bnode*> nodes(count);
    for (auto& n : nodes) {
        n = new bnode;
    }
    for (bnode* n : nodes) {
        get(n->value);
        std::uint32_t k = 0;
        get(k);
        n->edges.resize(k);
        for (auto& e : n->edges) {
            std::uint32_t i = 0;
            get(i);
            e = nodes[i];
        }
        get(n->len);
        if (n->len != 0) {
            n->data = new double[n->len];
            std::memcpy(n->data, p, n->len * sizeof(double));
            p += n->len * sizeof(double);
        }
    }
    return nodes.empty() ? nullptr : nodes[0];
}

// ---- Boost --------------------------------------------------------------------------------

std::string boost_save(bnode* root) {
    std::ostringstream os;
    {
        boost::archive::binary_oarchive oa(os);
        oa << root;
    }
    return std::move(os).str();
}

bnode* boost_load(std::string const& s) {
    std::istringstream is(s);
    boost::archive::binary_iarchive ia(is);
    bnode* root = nullptr;
    ia >> root;
    return root;
}

/// Boost recurses once per pointer: a ring of 2^16 nodes needs a deep stack.
void with_big_stack(std::function<void()> const& f) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, std::size_t{2} << 30);
    pthread_t t;
    auto* arg = const_cast<std::function<void()>*>(&f);
    pthread_create(
        &t, &attr,
        [](void* a) -> void* {
            (*static_cast<std::function<void()>*>(a))();
            return nullptr;
        },
        arg);
    pthread_join(t, nullptr);
    pthread_attr_destroy(&attr);
}

// ---- remote -------------------------------------------------------------------------------

/// Owns a graph (what the remote side receives).
struct graph {
    bnode* root = nullptr;
    graph() = default;
    graph(graph&& o) noexcept : root(std::exchange(o.root, nullptr)) {}
    graph& operator=(graph&& o) noexcept {
        std::swap(root, o.root);
        return *this;
    }
    ~graph() { free_graph(root); }
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::shared(root);
    }
};
struct graph_view {
    bnode* root = nullptr;
    template <class A>
    void serialize(A& ar, unsigned) {
        ar& cs::shared(root);
    }
};

graph echo_graph(graph& g) {
    return std::move(g);
}
COURIER_PLAIN_ACTION(echo_graph, echo_graph_action);

courier::serialize_buffer<char> echo_hand(courier::serialize_buffer<char> const& b) {
    bnode* g = hand_load(b.data());
    std::vector<char> out;
    hand_save(g, out);
    free_graph(g);
    return courier::serialize_buffer<char>(out.data(), out.size());
}
COURIER_PLAIN_ACTION(echo_hand, echo_hand_action);

courier::serialize_buffer<char> echo_boost(courier::serialize_buffer<char> const& b) {
    std::string s(b.data(), b.size());
    std::string out;
    with_big_stack([&] {
        bnode* g = boost_load(s);
        out = boost_save(g);
        free_graph(g);
    });
    return courier::serialize_buffer<char>(out.data(), out.size());
}
COURIER_PLAIN_ACTION(echo_boost, echo_boost_action);

// ---- timing -------------------------------------------------------------------------------

/// Median over `reps` repetitions of the mean time of one round trip (us). `op` returns the
/// copy it made, freed outside the timed region.
double time_round_trip(int reps, double min_seconds, std::function<bnode*()> const& op) {
    std::vector<double> samples;
    std::size_t iters = 1;
    for (int r = 0; r < reps + 1; ++r) {
        std::vector<bnode*> copies;
        copies.reserve(iters);
        auto t0 = clock_type::now();
        for (std::size_t k = 0; k < iters; ++k) {
            copies.push_back(op());
        }
        double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        for (bnode* c : copies) {
            free_graph(c);
        }
        if (r == 0) { // calibration
            iters = std::max<std::size_t>(1, static_cast<std::size_t>(min_seconds / (s + 1e-9)));
            continue;
        }
        samples.push_back(s / double(iters) * 1e6);
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

struct options {
    bool quick = false;
    unsigned max_log2 = 16;
    std::vector<std::string> cases{"memory", "file", "remote"};
    std::vector<std::string> structures{"tree",     "ring",      "random",
                                        "complete", "tree+512B", "tree+8KiB"};
};

std::map<std::tuple<std::string, std::string, std::size_t, std::string>, double> results;

void report(std::string const& c, std::string const& s, std::size_t n, std::string const& impl,
            double us) {
    results[{c, s, n, impl}] = us;
    std::printf("RESULT %s %s %zu %s %.3f\n", c.c_str(), s.c_str(), n, impl.c_str(), us);
    std::fflush(stdout);
}

int run(options const& o) {
    auto const& structures = o.structures;
    auto path = std::filesystem::temp_directory_path() /
                ("courier_deep_bench_" + std::to_string(::getpid()) + ".ckpt");
    int reps = o.quick ? 1 : 3;
    double min_s = o.quick ? 0.002 : 0.03;
    bool remote_ok = courier::get_num_localities() >= 2;
    for (auto const& c : o.cases) {
        if (c == "remote" && !remote_ok) {
            std::printf("(remote case skipped: run under courier-run -n 2)\n");
            continue;
        }
        for (auto const& s : structures) {
            unsigned max_log2 = s == "complete"    ? std::min(o.max_log2, 11u)
                                : s == "tree+8KiB" ? std::min(o.max_log2, 12u)
                                                   : o.max_log2;
            for (unsigned l = 0; l <= max_log2; l += 2) {
                std::size_t n = std::size_t{1} << l;
                if (l + 2 > max_log2 && l != max_log2) {
                    // always include the largest size
                }
                bnode* g = make_structure(s, n);
                for (auto [name, mode] :
                     {std::pair{"courier-buffered", cs::deep_mode::buffered},
                      std::pair{"courier-non_buffered", cs::deep_mode::non_buffered},
                      std::pair{"courier-adaptive", cs::deep_mode::adaptive}}) {
                    auto opts = cs::deep_copy_options(mode);
                    double us = 0;
                    if (c == "memory") {
                        cs::message m;
                        us = time_round_trip(reps, min_s, [&] {
                            cs::save_into(m, opts, cs::shared(g));
                            bnode* copy = nullptr;
                            cs::load(m, cs::shared(copy));
                            return copy;
                        });
                    } else if (c == "file") {
                        us = time_round_trip(reps, min_s, [&] {
                            cs::save_to_file(path, opts, cs::shared(g));
                            bnode* copy = nullptr;
                            cs::load_from_file(path, cs::shared(copy));
                            return copy;
                        });
                    } else {
                        if (mode != cs::deep_mode::adaptive) {
                            continue; // actions use the runtime's options
                        }
                        auto there = courier::find_all_localities()[1];
                        us = time_round_trip(reps, min_s, [&] {
                            graph back =
                                courier::async<echo_graph_action>(there, graph_view{g}).get();
                            return std::exchange(back.root, nullptr);
                        });
                        name = "courier";
                    }
                    report(c, s, n, name, us);
                    if (c == "file" && mode == cs::deep_mode::adaptive) {
                        // Written in place, as the baselines write (no tmp file + rename).
                        us = time_round_trip(reps, min_s, [&] {
                            cs::save_to_file(path, cs::checkpoint_options{false, false}, opts,
                                             cs::shared(g));
                            bnode* copy = nullptr;
                            cs::load_from_file(path, cs::shared(copy));
                            return copy;
                        });
                        report(c, s, n, "courier-adaptive-in_place", us);
                    }
                }
                // hand-coded
                {
                    std::vector<char> buf;
                    double us = time_round_trip(reps, min_s, [&]() -> bnode* {
                        hand_save(g, buf);
                        if (c == "memory") {
                            return hand_load(buf.data());
                        }
                        if (c == "file") {
                            {
                                std::FILE* f = std::fopen(path.c_str(), "wb");
                                std::fwrite(buf.data(), 1, buf.size(), f);
                                std::fclose(f);
                            }
                            std::vector<char> in(std::filesystem::file_size(path));
                            std::FILE* f = std::fopen(path.c_str(), "rb");
                            std::size_t got = std::fread(in.data(), 1, in.size(), f);
                            std::fclose(f);
                            return got == in.size() ? hand_load(in.data()) : nullptr;
                        }
                        auto there = courier::find_all_localities()[1];
                        auto back = courier::async<echo_hand_action>(
                                        there, courier::serialize_buffer<char>(
                                                   buf.data(), buf.size(),
                                                   courier::serialize_buffer<char>::reference))
                                        .get();
                        return hand_load(back.data());
                    });
                    report(c, s, n, "hand-coded", us);
                }
                // Boost
                {
                    double us = time_round_trip(reps, min_s, [&]() -> bnode* {
                        bnode* copy = nullptr;
                        if (c == "remote") {
                            std::string out;
                            with_big_stack([&] { out = boost_save(g); });
                            auto there = courier::find_all_localities()[1];
                            auto back = courier::async<echo_boost_action>(
                                            there, courier::serialize_buffer<char>(
                                                       out.data(), out.size(),
                                                       courier::serialize_buffer<char>::reference))
                                            .get();
                            std::string in(back.data(), back.size());
                            with_big_stack([&] { copy = boost_load(in); });
                            return copy;
                        }
                        with_big_stack([&] {
                            if (c == "memory") {
                                copy = boost_load(boost_save(g));
                            } else {
                                {
                                    std::ofstream os(path, std::ios::binary);
                                    boost::archive::binary_oarchive oa(os);
                                    oa << g;
                                }
                                std::ifstream is(path, std::ios::binary);
                                boost::archive::binary_iarchive ia(is);
                                ia >> copy;
                            }
                        });
                        return copy;
                    });
                    report(c, s, n, "boost", us);
                }
                free_graph(g);
            }
        }
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
    // Ratio summary: adaptive against the baselines, n >= 2^8.
    std::printf("\n| case | structure | n | adaptive us | best mode | adaptive/best | "
                "adaptive/hand | boost/adaptive | in place/hand | boost/in place |\n"
                "|---|---|---:|---:|---|---:|---:|---:|---:|---:|\n");
    for (auto const& [k, v] : results) {
        auto const& [c, s, n, impl] = k;
        std::string main = c == "remote" ? "courier" : "courier-adaptive";
        if (impl != main) {
            continue;
        }
        double hand = results[{c, s, n, "hand-coded"}];
        double boost = results[{c, s, n, "boost"}];
        std::string best = main;
        double best_us = v;
        if (c != "remote") {
            for (auto const* m : {"courier-buffered", "courier-non_buffered"}) {
                double x = results[{c, s, n, m}];
                if (x < best_us) {
                    best_us = x;
                    best = m;
                }
            }
        }
        std::string in_place = "-", boost_in_place = "-";
        if (c == "file") {
            double ip = results[{c, s, n, "courier-adaptive-in_place"}];
            in_place = std::to_string(ip / hand).substr(0, 4);
            boost_in_place = std::to_string(boost / ip).substr(0, 4);
        }
        std::printf("| %s | %s | %zu | %.1f | %s | %.2f | %.2f | %.2f | %s | %s |\n", c.c_str(),
                    s.c_str(), n, v, best.c_str() + 8, v / best_us, v / hand, boost / v,
                    in_place.c_str(), boost_in_place.c_str());
    }
    return 0;
}

options opts_from(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") {
            o.quick = true;
            o.max_log2 = 6;
        } else if (a.rfind("--max-log2=", 0) == 0) {
            o.max_log2 = static_cast<unsigned>(std::atoi(a.c_str() + 11));
        } else if (a.rfind("--cases=", 0) == 0 || a.rfind("--structures=", 0) == 0) {
            bool cases = a[2] == 'c';
            auto& list = cases ? o.cases : o.structures;
            list.clear();
            std::stringstream ss(a.substr(a.find('=') + 1));
            std::string c;
            while (std::getline(ss, c, ',')) {
                list.push_back(c);
            }
        }
    }
    return o;
}

int courier_main(int argc, char** argv) {
    int rc = run(opts_from(argc, argv));
    courier::finalize();
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    return courier::init(courier_main, argc, argv);
}
