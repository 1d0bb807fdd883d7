// SPDX-License-Identifier: BSL-1.0
// Loading libfabric.so.1 at first use (library.hpp).
#include "library.hpp"

#include <courier/parcelport/error.hpp>

#include <dlfcn.h>

#include <atomic>
#include <type_traits>

namespace courier::parcelport::fabric::library {

namespace {

struct functions {
    int (*getinfo)(std::uint32_t, char const*, char const*, std::uint64_t, fi_info const*,
                   fi_info**) = nullptr;
    void (*freeinfo)(fi_info*) = nullptr;
    fi_info* (*dupinfo)(fi_info const*) = nullptr;
    int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
    char const* (*strerror)(int) = nullptr;
    std::string error; // empty: loaded
};

std::atomic<char const*> g_soname{"libfabric.so.1"};

functions open_library() {
    functions f;
    std::string const soname = g_soname.load();
    void* handle = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        char const* why = ::dlerror();
        f.error = "cannot load " + soname + ": " + (why != nullptr ? why : "dlopen failed");
        return f;
    }
    auto resolve = [&](char const* name, auto& fn) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
        if (fn == nullptr && f.error.empty()) {
            f.error = soname + " has no " + name;
        }
    };
    resolve("fi_getinfo", f.getinfo);
    resolve("fi_freeinfo", f.freeinfo);
    resolve("fi_dupinfo", f.dupinfo);
    resolve("fi_fabric", f.fabric);
    resolve("fi_strerror", f.strerror);
    return f;
}

/// The library's functions, resolved once per process (a failure stays, as its error).
functions const& resolved() {
    static functions const f = open_library();
    return f;
}

functions const& loaded_functions() {
    functions const& f = resolved();
    if (!f.error.empty()) {
        throw network_error("libfabric: " + f.error);
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
        resolved().freeinfo(info); // only a loaded library made `info`
    }
}

std::string strerror(int error) noexcept {
    try {
        return loaded_functions().strerror(error);
    } catch (...) {
        return "libfabric error " + std::to_string(error);
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
