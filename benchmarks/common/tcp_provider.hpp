// SPDX-License-Identifier: BSL-1.0
// The libfabric provider Courier's "tcp" opens (parcelport::tcp_provider), for native baselines
// that do not link Courier: libfabric's net provider, with FI_EP_RDM of its own, where
// fi_getinfo offers it for FI_EP_RDM with FI_MSG and FI_RMA, else tcp under ofi_rxm.
#pragma once

#include <rdma/fabric.h>

#include <cstring>
#include <string>

namespace courier::bench {

inline std::string tcp_provider() {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->fabric_attr->prov_name = strdup("net");
    fi_info* info = nullptr;
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    fi_freeinfo(info);
    return rc == 0 ? "net" : "tcp;ofi_rxm";
}

} // namespace courier::bench
