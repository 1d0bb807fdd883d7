// SPDX-License-Identifier: BSL-1.0
// Loading libfabric.so.1 at first use or in the background (library.hpp).
#include "library.hpp"

#include <courier/parcelport/error.hpp>
#include <courier/parcelport/transport.hpp>

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

namespace courier::parcelport::fabric::library {

namespace {

using getinfo_fn = int (*)(std::uint32_t, char const*, char const*, std::uint64_t, fi_info const*,
                           fi_info**);
using freeinfo_fn = void (*)(fi_info*);
using dupinfo_fn = fi_info* (*)(fi_info const*);
using fabric_fn = int (*)(fi_fabric_attr*, fid_fabric**, void*);
using strerror_fn = char const* (*)(int);

// Trivially destructible: a loader thread still running at exit may finish constructing it
// after static destruction began, and nothing then needs tearing down (the library stays).
struct functions {
    getinfo_fn getinfo = nullptr;
    freeinfo_fn freeinfo = nullptr;
    dupinfo_fn dupinfo = nullptr;
    fabric_fn fabric = nullptr;
    strerror_fn strerror = nullptr;
    char error[512] = {}; // empty: loaded
};

std::atomic<char const*> g_soname{"libfabric.so.1"};

template <class F>
void resolve(void* handle, char const* name, F& f, char (&error)[512]) {
    f = reinterpret_cast<F>(::dlsym(handle, name));
    if (f == nullptr && error[0] == '\0') {
        std::snprintf(error, sizeof error, "%s has no %s", g_soname.load(), name);
    }
}

functions open_library() {
    functions f;
    char const* soname = g_soname.load();
    void* handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        char const* why = ::dlerror();
        std::snprintf(f.error, sizeof f.error, "cannot load %s: %s", soname,
                      why != nullptr ? why : "dlopen failed");
        return f;
    }
    resolve(handle, "fi_getinfo", f.getinfo, f.error);
    resolve(handle, "fi_freeinfo", f.freeinfo, f.error);
    resolve(handle, "fi_dupinfo", f.dupinfo, f.error);
    resolve(handle, "fi_fabric", f.fabric, f.error);
    resolve(handle, "fi_strerror", f.strerror, f.error);
    if (f.error[0] != '\0') {
        return f;
    }
    // The first fi_getinfo loads and initializes every provider (their environment settings
    // are read then: prepare_libfabric comes first). A provider name nothing has asks no
    // provider for its fabrics.
    fi_info* hints = f.dupinfo(nullptr);
    if (hints != nullptr) {
        hints->fabric_attr->prov_name = ::strdup("courier-loads-the-providers");
        fi_info* none = nullptr;
        (void)f.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &none);
        f.freeinfo(none);
        f.freeinfo(hints);
    }
    return f;
}

functions const& loading() {
    static functions const f = open_library();
    return f;
}

std::mutex g_background_mutex;
bool g_background_started = false;
struct joined_at_exit {
    std::thread t;
    ~joined_at_exit() {
        std::lock_guard g(g_background_mutex);
        if (t.joinable()) {
            t.join();
        }
    }
} g_background;

functions const& loaded_functions() {
    {
        std::lock_guard g(g_background_mutex);
        if (g_background.t.joinable()) {
            g_background.t.join(); // it has loaded the library, or failed to
        }
    }
    functions const& f = loading();
    if (f.error[0] != '\0') {
        throw network_error(std::string("libfabric: ") + f.error);
    }
    return f;
}

} // namespace

int getinfo(std::uint32_t version, char const* node, char const* service, std::uint64_t flags,
            fi_info const* hints, fi_info** info) {
    return loaded_functions().getinfo(version, node, service, flags, hints, info);
}

fi_info* allocinfo() {
    return loaded_functions().dupinfo(nullptr);
}

fi_info* dupinfo(fi_info const* info) {
    return loaded_functions().dupinfo(info);
}

int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
    return loaded_functions().fabric(attr, fabric, context);
}

void freeinfo(fi_info* info) noexcept {
    if (info != nullptr) {
        // Only a loaded library made `info`: its functions are resolved.
        loading().freeinfo(info);
    }
}

std::string strerror(int error) noexcept {
    try {
        return loaded_functions().strerror(error);
    } catch (...) {
        return "libfabric error " + std::to_string(error);
    }
}

void load_in_background() {
    std::lock_guard g(g_background_mutex);
    if (g_background_started) {
        return;
    }
    g_background_started = true;
    try {
        g_background.t = std::thread([] { (void)loading(); });
    } catch (std::system_error const&) {
        // No thread to spare: the first use loads it.
    }
}

void testing::use_library(char const* soname) noexcept {
    g_soname.store(soname);
}

bool loaded() noexcept {
    void* handle = ::dlopen("libfabric.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) {
        return false;
    }
    ::dlclose(handle); // drops the reference RTLD_NOLOAD took
    return true;
}

} // namespace courier::parcelport::fabric::library

namespace courier::parcelport {

void load_libfabric_in_background() {
    fabric::library::load_in_background();
}

} // namespace courier::parcelport
