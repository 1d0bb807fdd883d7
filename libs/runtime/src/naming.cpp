// SPDX-License-Identifier: BSL-1.0
// The name service: each locality serves the names that hash to it. A lookup of a name not yet
// registered is answered when the registration comes (a deferred reply: the waiting costs a
// table entry, no thread).
#include "gid.hpp"
#include "locality_state.hpp"
#include "log.hpp"

#include <courier/runtime/naming.hpp>

#include <fmt/format.h>

namespace courier::detail {
namespace {

// Lookups that wait for their name, at most, on one locality (a flood of lookups for names
// nobody registers must not grow without bound): beyond it a lookup fails at once.
constexpr std::size_t max_waiting_lookups = std::size_t{1} << 20;

std::string name_of(std::string const& base, std::size_t sequence_nr) {
    return base + '#' + std::to_string(sequence_nr);
}

std::uint32_t server_of(std::string const& name) {
    return static_cast<std::uint32_t>(serialization::detail::fnv1a64(name) % get_num_localities());
}

void check_alive(locality_state& st, std::string const& name, id_type const& id) {
    if (names_a_locality(id.msb, st.size) && has_failed(st, owner_of(id.msb))) {
        throw network_error(fmt::format("courier: the name {} names an id on locality {}, which "
                                        "has failed",
                                        name, owner_of(id.msb)));
    }
}

bool register_name(std::string name, id_type id) {
    locality_state& st = here();
    std::vector<request_context> waiting;
    {
        std::lock_guard lk(st.names.mutex);
        if (!st.names.ids.emplace(name, id).second) {
            return false;
        }
        if (auto w = st.names.waiting.find(name); w != st.names.waiting.end()) {
            waiting = std::move(w->second);
            st.names.waiting_count -= waiting.size();
            st.names.waiting.erase(w);
        }
    }
    for (auto const& r : waiting) {
        send_deferred_result(r, id);
    }
    return true;
}

id_type unregister_name(std::string name) {
    locality_state& st = here();
    std::lock_guard lk(st.names.mutex);
    auto it = st.names.ids.find(name);
    if (it == st.names.ids.end()) {
        return {};
    }
    id_type id = std::move(it->second);
    st.names.ids.erase(it);
    return id;
}

} // namespace
} // namespace courier::detail

COURIER_PLAIN_ACTION(courier::detail::register_name, courier_register_name_action);
COURIER_PLAIN_ACTION(courier::detail::unregister_name, courier_unregister_name_action);

namespace courier::detail {
namespace {

/// The lookup: answers at once when the name is known, else when it is registered.
struct find_name_action {
    using courier_action_tag = void;
    using result_type = id_type;
    static constexpr char const* name = "courier_find_name_action";
    static std::uint64_t wire_id() noexcept { return serialization::detail::fnv1a64(name); }

    static void invoke(serialization::input_archive& in, serialization::output_archive* out) {
        request_context* ctx = current_request();
        std::string key;
        in.load(key);
        in.finish();
        locality_state& st = here();
        std::unique_lock lk(st.names.mutex);
        if (auto it = st.names.ids.find(key); it != st.names.ids.end()) {
            id_type id = it->second;
            lk.unlock(); // saving may ask the component's locality for credits: a round trip
            check_alive(st, key, id);
            if (out != nullptr) {
                out->save(id);
            }
            return;
        }
        if (ctx == nullptr || ctx->rid == 0) {
            throw std::invalid_argument("courier: a lookup of name " + key + " with no caller");
        }
        if (st.names.waiting_count >= max_waiting_lookups) {
            throw std::runtime_error(
                fmt::format("courier: {} lookups already wait for names on locality {}",
                            max_waiting_lookups, st.rank));
        }
        ctx->deferred = true;
        st.names.waiting[key].push_back(*ctx);
        ++st.names.waiting_count;
    }
};
[[maybe_unused]] bool const find_registered =
    register_action(find_name_action::wire_id(), find_name_action::name, &find_name_action::invoke);

/// A remote network_error arrives as a remote_exception naming its type: rethrown as one.
template <class T>
T rethrow_network_errors(future<T> f) {
    try {
        return f.get();
    } catch (remote_exception const& e) {
        if (e.type_name().ends_with("network_error")) {
            throw network_error(e.message());
        }
        throw;
    }
}

} // namespace
} // namespace courier::detail

namespace courier {

future<bool> register_with_basename(std::string base, id_type id, std::size_t sequence_nr) {
    std::string name = detail::name_of(base, sequence_nr);
    std::uint32_t server = detail::server_of(name);
    return async<courier_register_name_action>(detail::locality_id(server), std::move(name),
                                               std::move(id));
}

future<id_type> find_from_basename(std::string base, std::size_t sequence_nr) {
    std::string name = detail::name_of(base, sequence_nr);
    std::uint32_t server = detail::server_of(name);
    return async<detail::find_name_action>(detail::locality_id(server), std::move(name))
        .then([](future<id_type> f) { return detail::rethrow_network_errors(std::move(f)); });
}

future<id_type> unregister_with_basename(std::string base, std::size_t sequence_nr) {
    std::string name = detail::name_of(base, sequence_nr);
    std::uint32_t server = detail::server_of(name);
    return async<courier_unregister_name_action>(detail::locality_id(server), std::move(name));
}

} // namespace courier
