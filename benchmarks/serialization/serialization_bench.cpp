// SPDX-License-Identifier: BSL-1.0
// Serialization round trips: Courier (zero copy on and off) against Boost.Serialization
// (binary archive), cereal (binary archive) and a hand-written memcpy pack/unpack (the floor),
// all in the same run. Cases: the cpp-serializers record (1000 int64 + 100 x 86-char strings),
// a small struct, and one 16 MiB vector<double>; and the record and the small struct as
// aggregates with no code against the same with a hand-written serialize(). Prints ns per
// serialize+deserialize round trip, archive bytes, the ratios, and checks the targets.
//
//   serialization_bench [--quick]
#include "common/harness.hpp"

#include <courier/serialization.hpp>

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <algorithm>
#include <cstring>
#include <istream>
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define COURIER_HAVE_CALLGRIND 1
#endif
#include <map>
#include <ostream>
#include <streambuf>

namespace cs = courier::serialization;
namespace cb = courier::bench;

// ---- the data -------------------------------------------------------------------------------

#define DEFINE_RECORD(ns)                                                                          \
    namespace ns {                                                                                 \
    struct record {                                                                                \
        std::vector<std::int64_t> ids;                                                             \
        std::vector<std::string> strings;                                                          \
        bool operator==(record const&) const = default;                                            \
    };                                                                                             \
    struct small {                                                                                 \
        std::int32_t id = 0;                                                                       \
        double x = 0, y = 0, z = 0;                                                                \
        std::uint64_t flags = 0;                                                                   \
        std::string name;                                                                          \
        bool operator==(small const&) const = default;                                             \
    };                                                                                             \
    struct big {                                                                                   \
        std::vector<double> v;                                                                     \
    };                                                                                             \
    }

DEFINE_RECORD(c_side)
DEFINE_RECORD(k_side)
DEFINE_RECORD(a_side) // aggregates with no serialization code at all

namespace c_side { // Courier and Boost both call these: same (Archive&, T&, unsigned) signature
template <class A>
void serialize(A& ar, record& r, unsigned) {
    ar& r.ids& r.strings;
}
template <class A>
void serialize(A& ar, small& s, unsigned) {
    ar& s.id& s.x& s.y& s.z& s.flags& s.name;
}
template <class A>
void serialize(A& ar, big& b, unsigned) {
    ar& b.v;
}
} // namespace c_side
namespace k_side { // cereal
template <class A>
void serialize(A& ar, record& r) {
    ar(r.ids, r.strings);
}
template <class A>
void serialize(A& ar, small& s) {
    ar(s.id, s.x, s.y, s.z, s.flags, s.name);
}
template <class A>
void serialize(A& ar, big& b) {
    ar(b.v);
}
} // namespace k_side

namespace {

std::string const string_value =
    "shgfkghsdfjhgsfjhfgjhfgjsffghgsfdhgsfdfkdjhfioukjhkfdljgdfkgvjafdhasgdfwurtjkghfsdjkfg";
static_assert(
    sizeof(
        "shgfkghsdfjhgsfjhfgjhfgjsffghgsfdhgsfdfkdjhfioukjhkfdljgdfkgvjafdhasgdfwurtjkghfsdjkfg") ==
    87);

template <class R>
R make_record() {
    R r;
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 1000; ++i) { // large and negative values, as in cpp-serializers
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.ids.push_back(static_cast<std::int64_t>(x));
    }
    r.strings.assign(100, string_value);
    return r;
}
template <class S>
S make_small() {
    S s;
    s.id = 12345;
    s.x = 1.5;
    s.y = -2.25;
    s.z = 1e10;
    s.flags = 0xf00dull;
    s.name = "particle-0042";
    return s;
}
template <class B>
B make_big() {
    B b;
    b.v.resize(2 * 1024 * 1024);
    for (std::size_t i = 0; i < b.v.size(); ++i) {
        b.v[i] = double(i) * 0.5 + 1.0;
    }
    return b;
}

// ---- a vector-backed streambuf for Boost and cereal (as in the anchor measurements) ----------

class vec_out_buf : public std::streambuf {
public:
    std::vector<char> data;
    void reset() { data.clear(); }

protected:
    std::streamsize xsputn(char const* s, std::streamsize n) override {
        data.insert(data.end(), s, s + n);
        return n;
    }
    int_type overflow(int_type c) override {
        if (c != traits_type::eof()) {
            data.push_back(static_cast<char>(c));
        }
        return c;
    }
};

class span_in_buf : public std::streambuf {
public:
    span_in_buf(char const* p, std::size_t n) {
        char* b = const_cast<char*>(p);
        setg(b, b, b + n);
    }
};

// ---- the memcpy floor -----------------------------------------------------------------------

struct memcpy_codec {
    std::vector<char> buf;
    void pack(c_side::record const& r) {
        std::size_t n = 8 + r.ids.size() * 8 + 8;
        for (auto const& s : r.strings) {
            n += 8 + s.size();
        }
        buf.resize(n);
        char* p = buf.data();
        std::uint64_t c = r.ids.size();
        std::memcpy(p, &c, 8);
        p += 8;
        std::memcpy(p, r.ids.data(), c * 8);
        p += c * 8;
        c = r.strings.size();
        std::memcpy(p, &c, 8);
        p += 8;
        for (auto const& s : r.strings) {
            std::uint64_t l = s.size();
            std::memcpy(p, &l, 8);
            p += 8;
            std::memcpy(p, s.data(), l);
            p += l;
        }
    }
    void unpack(c_side::record& r) const {
        char const* p = buf.data();
        std::uint64_t c;
        std::memcpy(&c, p, 8);
        p += 8;
        r.ids.resize(c);
        std::memcpy(r.ids.data(), p, c * 8);
        p += c * 8;
        std::memcpy(&c, p, 8);
        p += 8;
        r.strings.resize(c);
        for (auto& s : r.strings) {
            std::uint64_t l;
            std::memcpy(&l, p, 8);
            p += 8;
            s.assign(p, l);
            p += l;
        }
    }
    void pack(c_side::small const& s) {
        buf.resize(4 + 8 * 3 + 8 + 8 + s.name.size());
        char* p = buf.data();
        std::memcpy(p, &s.id, 4);
        std::memcpy(p + 4, &s.x, 8);
        std::memcpy(p + 12, &s.y, 8);
        std::memcpy(p + 20, &s.z, 8);
        std::memcpy(p + 28, &s.flags, 8);
        std::uint64_t l = s.name.size();
        std::memcpy(p + 36, &l, 8);
        std::memcpy(p + 44, s.name.data(), l);
    }
    void unpack(c_side::small& s) const {
        char const* p = buf.data();
        std::memcpy(&s.id, p, 4);
        std::memcpy(&s.x, p + 4, 8);
        std::memcpy(&s.y, p + 12, 8);
        std::memcpy(&s.z, p + 20, 8);
        std::memcpy(&s.flags, p + 28, 8);
        std::uint64_t l;
        std::memcpy(&l, p + 36, 8);
        s.name.assign(p + 44, l);
    }
    void pack(c_side::big const& b) {
        buf.resize(8 + b.v.size() * 8);
        std::uint64_t c = b.v.size();
        std::memcpy(buf.data(), &c, 8);
        std::memcpy(buf.data() + 8, b.v.data(), c * 8);
    }
    void unpack(c_side::big& b) const {
        std::uint64_t c;
        std::memcpy(&c, buf.data(), 8);
        b.v.resize(c);
        std::memcpy(b.v.data(), buf.data() + 8, c * 8);
    }
};

// ---- one round trip per library --------------------------------------------------------------

template <class T>
struct courier_rt {
    cs::options opt;
    cs::message msg;
    std::size_t bytes() const { return msg.total_size(); }
    void operator()(T const& src, T& dst) {
        cs::save_into(msg, opt, src);
        cs::load(msg, dst);
    }
};

template <class T>
struct boost_rt {
    vec_out_buf out;
    std::size_t bytes() const { return out.data.size(); }
    void operator()(T const& src, T& dst) {
        out.reset();
        {
            boost::archive::binary_oarchive oa(out);
            oa << src;
        }
        span_in_buf in(out.data.data(), out.data.size());
        boost::archive::binary_iarchive ia(in);
        ia >> dst;
    }
};

template <class T>
struct cereal_rt {
    vec_out_buf out;
    std::size_t bytes() const { return out.data.size(); }
    void operator()(T const& src, T& dst) {
        out.reset();
        {
            std::ostream os(&out);
            cereal::BinaryOutputArchive oa(os);
            oa(src);
        }
        span_in_buf in(out.data.data(), out.data.size());
        std::istream is(&in);
        cereal::BinaryInputArchive ia(is);
        ia(dst);
    }
};

template <class T>
struct memcpy_rt {
    memcpy_codec codec;
    std::size_t bytes() const { return codec.buf.size(); }
    void operator()(T const& src, T& dst) {
        codec.pack(src);
        codec.unpack(dst);
    }
};

struct options_t {
    int reps = 11;
    double rep_seconds = 0.08;
};

void print_group(char const* title, std::vector<cb::result> const& rs, double floor_ns) {
    std::printf("\n%s\n", title);
    std::printf("  %-28s %12s %22s %10s %9s\n", "case", "median ns", "(min - max)", "bytes",
                "x floor");
    for (auto const& r : rs) {
        std::printf("  %-28s %12.0f %10.0f - %-10.0f %10zu %9.2f\n", r.name.c_str(), r.median_ns,
                    r.min_ns, r.max_ns, r.bytes, r.median_ns / floor_ns);
    }
}

double median_of(std::vector<cb::result> const& rs, std::string const& name) {
    for (auto const& r : rs) {
        if (r.name == name) {
            return r.median_ns;
        }
    }
    return 0;
}
// Best repetition: on a shared VM, interference only ever adds time, so the minimum is the
// estimate least disturbed by other tenants. Targets are checked on it; medians are printed too.
double best_of(std::vector<cb::result> const& rs, std::string const& name) {
    for (auto const& r : rs) {
        if (r.name == name) {
            return r.min_ns;
        }
    }
    return 0;
}
std::size_t bytes_of(std::vector<cb::result> const& rs, std::string const& name) {
    for (auto const& r : rs) {
        if (r.name == name) {
            return r.bytes;
        }
    }
    return 0;
}

int failures = 0;
void target(bool ok, std::string const& what) {
    std::printf("  [%s] %s\n", ok ? "met " : "MISS", what.c_str());
    failures += !ok;
}

// Runs the five libraries on one data set. `fresh`: the destination is default-constructed
// inside every round trip (what a receiver does); otherwise it is reused (thekvs convention).
template <class C, class B, class K>
std::vector<cb::result> run_libraries(C const& c_src, B const& b_src, K const& k_src, bool fresh,
                                      options_t const& o, bool (*equal)(C const&, C const&)) {
    auto c_on = std::make_shared<courier_rt<C>>();
    c_on->opt = {4096, true};
    auto c_off = std::make_shared<courier_rt<C>>();
    c_off->opt = {4096, false};
    auto bo = std::make_shared<boost_rt<B>>();
    auto ce = std::make_shared<cereal_rt<K>>();
    auto mc = std::make_shared<memcpy_rt<C>>();
    auto c_dst = std::make_shared<C>();
    auto b_dst = std::make_shared<B>();
    auto k_dst = std::make_shared<K>();

    // Correctness first (and the byte counts).
    (*c_on)(c_src, *c_dst);
    target(equal(*c_dst, c_src), "courier zero-copy on round trip is exact");
    *c_dst = C{};
    (*c_off)(c_src, *c_dst);
    target(equal(*c_dst, c_src), "courier zero-copy off round trip is exact");
    *c_dst = C{};
    (*mc)(c_src, *c_dst);
    target(equal(*c_dst, c_src), "memcpy round trip is exact");
    (*bo)(b_src, *b_dst);
    if constexpr (std::is_same_v<B, C>) {
        target(equal(*b_dst, c_src), "boost round trip is exact");
    }
    (*ce)(k_src, *k_dst);

    auto wrap = [fresh](auto rt, auto const& src, auto dst) {
        return [rt, &src, dst, fresh] {
            if (fresh) {
                std::remove_cvref_t<decltype(*dst)> d;
                (*rt)(src, d);
                cb::do_not_optimize(d);
            } else {
                (*rt)(src, *dst);
                cb::do_not_optimize(*dst);
            }
        };
    };
    std::vector<cb::timed_case> cases = {
        {"memcpy (floor)", wrap(mc, c_src, c_dst), mc->bytes()},
        {"courier zero-copy on", wrap(c_on, c_src, c_dst), c_on->bytes()},
        {"courier zero-copy off", wrap(c_off, c_src, c_dst), c_off->bytes()},
        {"cereal binary", wrap(ce, k_src, k_dst), ce->bytes()},
        {"boost binary", wrap(bo, b_src, b_dst), bo->bytes()},
    };
    return cb::run_group(cases, o.reps, o.rep_seconds);
}

bool eq_record(c_side::record const& a, c_side::record const& b) {
    return a == b;
}
bool eq_small(c_side::small const& a, c_side::small const& b) {
    return a == b;
}
bool eq_big(c_side::big const& a, c_side::big const& b) {
    return a.v == b.v;
}

void summarize(std::vector<cb::result> const& rs) {
    for (auto [what, get] : {std::pair{"medians", &median_of}, std::pair{"best", &best_of}}) {
        double on = get(rs, "courier zero-copy on");
        double off = get(rs, "courier zero-copy off");
        double ce = get(rs, "cereal binary");
        double bo = get(rs, "boost binary");
        double fl = get(rs, "memcpy (floor)");
        std::printf(
            "  ratios (%s): courier-on/floor %.2f, courier-off/floor %.2f, cereal/courier-on "
            "%.2fx, boost/courier-on %.2fx, cereal/courier-off %.2fx, boost/courier-off "
            "%.2fx\n",
            what, on / fl, off / fl, ce / on, bo / on, ce / off, bo / off);
    }
}

// The same structs with no code (aggregates, member by member) against a hand-written
// serialize(): what the user saves by not writing one must cost nothing.
// Where the sources' strings land in the heap moves either case by up to ~7 % between runs at
// equal instruction counts. So each side is built twice, once before the other and once after,
// all four cases are timed interleaved, and each side keeps its better placement.
template <class C, class A>
std::vector<cb::result> aggregate_vs_hand_written(C (*make_c)(), A (*make_a)(),
                                                  options_t const& o) {
    struct side_c {
        C src, dst;
        std::shared_ptr<courier_rt<C>> rt = std::make_shared<courier_rt<C>>();
    };
    struct side_a {
        A src, dst;
        std::shared_ptr<courier_rt<A>> rt = std::make_shared<courier_rt<A>>();
    };
    auto c1 = std::make_shared<side_c>(side_c{make_c(), C{}});
    auto a1 = std::make_shared<side_a>(side_a{make_a(), A{}});
    auto a2 = std::make_shared<side_a>(side_a{make_a(), A{}});
    auto c2 = std::make_shared<side_c>(side_c{make_c(), C{}});
    std::vector<cb::timed_case> cases;
    for (auto const& c : {c1, c2}) {
        (*c->rt)(c->src, c->dst);
        cases.push_back({"hand-written serialize()",
                         [c] {
                             (*c->rt)(c->src, c->dst);
                             cb::do_not_optimize(c->dst);
                         },
                         c->rt->bytes()});
    }
    for (auto const& a : {a1, a2}) {
        (*a->rt)(a->src, a->dst);
        target(a->dst == a->src && a->rt->bytes() == c1->rt->bytes(),
               "aggregate round trip is exact and writes the same bytes as serialize()");
        cases.push_back({"aggregate, no code",
                         [a] {
                             (*a->rt)(a->src, a->dst);
                             cb::do_not_optimize(a->dst);
                         },
                         a->rt->bytes()});
    }
    auto timed = cb::run_group(cases, o.reps, o.rep_seconds);
    std::vector<cb::result> best; // per side, the better of its two placements
    for (auto const& r : timed) {
        auto it = std::find_if(best.begin(), best.end(),
                               [&](cb::result const& b) { return b.name == r.name; });
        if (it == best.end()) {
            best.push_back(r);
        } else if (r.median_ns < it->median_ns) {
            *it = r;
        }
    }
    return best;
}

// Save cost alone for growing payloads, zero copy on: a pointer chunk costs the same at any size.
std::vector<cb::result> save_only_by_size(options_t const& o,
                                          std::vector<std::vector<double>>& keep) {
    std::vector<cb::timed_case> cases;
    for (std::size_t n : {std::size_t{2048}, std::size_t{128} << 10, std::size_t{2} << 20}) {
        keep.emplace_back(n, 1.0);
        auto msg = std::make_shared<cs::message>();
        auto const* v = &keep.back();
        cases.push_back({"save " + std::to_string(n * 8 >> 10) + " KiB",
                         [msg, v] {
                             cs::save_into(*msg, cs::options{4096, true}, *v);
                             cb::do_not_optimize(msg->index_size());
                         },
                         n * 8});
    }
    return cb::run_group(cases, o.reps, o.rep_seconds);
}

// One pass with geometric growth versus the best a sizing pass could give (a buffer reserved to
// the exact size, the sizing pass itself not counted), versus a reused message.
std::vector<cb::result> growth_strategy(options_t const& o, c_side::record const& r) {
    auto exact = cs::save(cs::options{4096, false}, r).index_size();
    std::vector<cb::timed_case> cases = {
        {"fresh message, grows",
         [&r] {
             auto m = cs::save(cs::options{4096, false}, r);
             cb::do_not_optimize(m.index_size());
         }},
        {"fresh message, exact reserve",
         [&r, exact] {
             cs::message m;
             m.reserve(exact);
             cs::save_into(m, cs::options{4096, false}, r);
             cb::do_not_optimize(m.index_size());
         }},
        {"reused message",
         [&r, m = std::make_shared<cs::message>()] {
             cs::save_into(*m, cs::options{4096, false}, r);
             cb::do_not_optimize(m->index_size());
         }},
    };
    return cb::run_group(cases, o.reps, o.rep_seconds);
}

// --ir=CASE: runs 500 round trips of one case (ir.sh lists them) with callgrind instrumentation on
// only around them (run under valgrind --tool=callgrind --instr-atstart=no); see ir.sh.
int instruction_count_mode(std::string const& which) {
    constexpr int n = 500;
    auto rec = make_record<c_side::record>();
    auto rec_b = make_record<c_side::record>();
    auto rec_k = make_record<k_side::record>();
    c_side::record dst;
    c_side::record dst_b;
    k_side::record dst_k;
    auto run = [&](auto& rt, auto const& src, auto& d) {
        rt(src, d); // warm: buffers at full capacity
#ifdef COURIER_HAVE_CALLGRIND
        CALLGRIND_START_INSTRUMENTATION;
#endif
        for (int i = 0; i < n; ++i) {
            rt(src, d);
        }
#ifdef COURIER_HAVE_CALLGRIND
        CALLGRIND_STOP_INSTRUMENTATION;
#endif
        return 0;
    };
    if (which == "memcpy") {
        memcpy_rt<c_side::record> rt;
        return run(rt, rec, dst);
    }
    if (which == "courier-on" || which == "courier-off") {
        courier_rt<c_side::record> rt;
        rt.opt = {4096, which == "courier-on"};
        return run(rt, rec, dst);
    }
    if (which == "courier-aggregate") { // the record with no serialization code, zero copy on
        auto rec_a = make_record<a_side::record>();
        a_side::record dst_a;
        courier_rt<a_side::record> rt;
        rt.opt = {4096, true};
        return run(rt, rec_a, dst_a);
    }
    if (which == "courier-small" || which == "courier-small-aggregate") {
        auto sm = make_small<c_side::small>();
        auto sm_a = make_small<a_side::small>();
        c_side::small d;
        a_side::small d_a;
        courier_rt<c_side::small> rt;
        courier_rt<a_side::small> rt_a;
        return which == "courier-small" ? run(rt, sm, d) : run(rt_a, sm_a, d_a);
    }
    if (which == "cereal") {
        cereal_rt<k_side::record> rt;
        return run(rt, rec_k, dst_k);
    }
    if (which == "boost") {
        boost_rt<c_side::record> rt;
        return run(rt, rec_b, dst_b);
    }
    std::fprintf(stderr, "unknown case %s\n", which.c_str());
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    options_t o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--quick") {
            o.reps = 3;
            o.rep_seconds = 0.03;
        } else if (a.rfind("--ir=", 0) == 0) {
            return instruction_count_mode(a.substr(5));
        } else {
            std::fprintf(stderr, "usage: serialization_bench [--quick] [--ir=CASE]\n");
            return 2;
        }
    }
    std::printf("Courier serialization benchmark: ns per serialize+deserialize round trip, median "
                "(min - max) of %d interleaved repetitions; x floor = relative to memcpy\n",
                o.reps);
    std::printf("Boost and cereal write into / read from a vector-backed streambuf (no "
                "stringstream); Boost with default archive flags.\n\n");

    std::printf("correctness:\n");
    auto rec = make_record<c_side::record>();
    auto rec_b = make_record<c_side::record>();
    auto rec_k = make_record<k_side::record>();
    auto r1 = run_libraries(rec, rec_b, rec_k, false, o, eq_record);
    auto r2 = run_libraries(rec, rec_b, rec_k, true, o, eq_record);
    auto sm = make_small<c_side::small>();
    auto r3 = run_libraries(sm, make_small<c_side::small>(), make_small<k_side::small>(), false, o,
                            eq_small);
    auto big = make_big<c_side::big>();
    auto big_b = make_big<c_side::big>();
    auto big_k = make_big<k_side::big>();
    options_t ob = o;
    ob.rep_seconds = std::max(o.rep_seconds, 0.1);
    auto r4 = run_libraries(big, big_b, big_k, false, ob, eq_big);

    print_group("record (1000 int64 + 100 x 86-char strings), destination reused", r1,
                median_of(r1, "memcpy (floor)"));
    summarize(r1);
    print_group("record, fresh destination every round trip", r2, median_of(r2, "memcpy (floor)"));
    summarize(r2);
    print_group("small struct (int32, 3 doubles, u64, 13-char string), destination reused", r3,
                median_of(r3, "memcpy (floor)"));
    summarize(r3);
    print_group("one 16 MiB vector<double>, destination reused", r4,
                median_of(r4, "memcpy (floor)"));
    summarize(r4);

    std::printf("\naggregates with no code against hand-written serialize() (zero copy on):\n");
    auto r7 =
        aggregate_vs_hand_written(&make_record<c_side::record>, &make_record<a_side::record>, o);
    auto r8 = aggregate_vs_hand_written(&make_small<c_side::small>, &make_small<a_side::small>, o);

    std::vector<std::vector<double>> keep;
    auto r5 = save_only_by_size(o, keep);
    print_group("save only, zero copy on, growing payload", r5, r5.front().median_ns);
    auto r6 = growth_strategy(o, rec);
    print_group("one-pass growth vs exact reserve (record, zero copy off, save only)", r6,
                r6.back().median_ns);
    print_group("record: aggregate (no code) vs hand-written serialize()", r7,
                median_of(r7, "hand-written serialize()"));
    print_group("small struct: aggregate (no code) vs hand-written serialize()", r8,
                median_of(r8, "hand-written serialize()"));

    // Copies on the save side of the 16 MiB message: none of the payload enters the buffer.
    cs::message m = cs::save(cs::options{4096, true}, big);
    bool no_copy = m.index_size() < 64 && m.external_chunk_count() == 1 &&
                   m.chunks()[1].address == reinterpret_cast<std::byte const*>(big.v.data());

    std::printf("\ntargets (issue 2):\n");
    std::printf("  (timing targets on the best repetition of each case; see summarize())\n");
    double floor = best_of(r1, "memcpy (floor)");
    double on = best_of(r1, "courier zero-copy on");
    double off = best_of(r1, "courier zero-copy off");
    target(on <= 1.5 * floor, "record round trip, zero copy on <= 1.5x memcpy floor: " +
                                  std::to_string(on / floor) + "x");
    target(off <= 1.5 * floor, "record round trip, zero copy off <= 1.5x memcpy floor: " +
                                   std::to_string(off / floor) + "x");
    double ce = best_of(r1, "cereal binary"), bo = best_of(r1, "boost binary");
    target(ce >= 3 * on && bo >= 3 * on, "record: >= 3x faster than cereal (" +
                                             std::to_string(ce / on) + "x) and Boost (" +
                                             std::to_string(bo / on) + "x)");
    target(bytes_of(r1, "courier zero-copy off") <= bytes_of(r1, "cereal binary"),
           "record archive (zero copy off, all bytes inline) " +
               std::to_string(bytes_of(r1, "courier zero-copy off")) + " B <= cereal's " +
               std::to_string(bytes_of(r1, "cereal binary")) + " B");
    double s_small = r5.front().min_ns, s_big = r5.back().min_ns;
    target(s_big <= 2.0 * s_small,
           "16 MiB save costs the same as 16 KiB (pointer chunk): " + std::to_string(s_big) +
               " ns vs " + std::to_string(s_small) + " ns");
    target(no_copy, "16 MiB save: payload referenced, index buffer " +
                        std::to_string(m.index_size()) + " B, growth copied " +
                        std::to_string(m.growth_copied_bytes()) + " B");
    std::printf("\ntargets (issue 24):\n");
    for (auto const* g : {&r7, &r8}) {
        double hand = best_of(*g, "hand-written serialize()");
        double agg = best_of(*g, "aggregate, no code");
        target(agg <= 1.05 * hand, std::string(g == &r7 ? "record" : "small struct") +
                                       ": aggregate / hand-written serialize() <= 1.05: " +
                                       std::to_string(agg / hand) + "x");
    }
    std::printf("\n%s\n", failures == 0 ? "all targets met" : "SOME TARGETS MISSED");
    return 0; // timing targets are reported, not enforced: shared machines are noisy
}
