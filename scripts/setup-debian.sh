#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Installs the Debian 12 packages Courier builds, tests and benchmarks with, when missing
# (OpenMPI and matplotlib: the MPI baseline of benchmarks/osu, its plots and
# benchmarks/plot_trace.py; Python 3: the trace and counter checks of tests/distributed, which
# need only its json module; PMIx: the bootstrap under mpirun and srun; iproute2: the
# network-namespace test cluster; Slurm and munge: the one-machine Slurm of
# tests/cluster/slurm-single-node).
# As root it runs apt-get; otherwise it prints the exact apt-get line and stops.
set -euo pipefail

packages=(
    g++ cmake ninja-build pkg-config
    libfabric-dev libfabric-bin libboost-context-dev libhwloc-dev libfmt-dev
    libgtest-dev libgmock-dev libbenchmark-dev
    libboost-serialization-dev libcereal-dev libboost-fiber-dev libtbb-dev
    clang libclang-rt-14-dev clang-format valgrind bc
    libopenmpi-dev openmpi-bin libpmix-dev python3 python3-matplotlib
    iproute2 procps slurmd slurmctld slurm-client munge
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages present"
    exit 0
fi

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root:  apt-get update && $line" >&2
    exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends "${missing[@]}"
