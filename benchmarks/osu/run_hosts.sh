#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# OSU latency and bandwidth between two hosts, Courier against OpenMPI's tcp path, in paired
# rounds (the order alternates each round), plus the intra-host pair of the same Courier job
# over shm and OpenMPI's shared memory (vader) for reference. Runs inside a netns-cluster of two
# hosts (every process started by the cluster's agent, both launchers alike):
#   tests/cluster/netns-cluster --hosts=2 --slots=2 -- benchmarks/osu/run_hosts.sh [--rounds=N]
#       [--sizes=N,N,...] [--build=DIR] [--out=DIR] [LABEL=ARGS ...]
# LABEL=ARGS: one more Courier configuration between the hosts, "courier-LABEL", the
# courier-tcp run with the --courier: options in ARGS added (courier-run passes them to every
# locality), e.g. wait="--courier:tcp_doorbell=0", interleaved in the rounds like the others.
# Courier: one job of 4 localities (2 per host, provider auto, one worker each); osu_courier
# measures locality 0 against locality 2 (other host: tcp) and against locality 1 (same host:
# shm). OpenMPI: -np 2 with one rank per host, ob1 over tcp on the cluster's addresses (and
# -np 2 on host 0 over vader). Native libfabric between the same hosts (`fabric-tcp`, latency
# only): libfabric's own fi_pingpong (package libfabric-bin), FI_EP_RDM over the provider
# Courier's "tcp" opens (net where fi_info offers it, else tcp;ofi_rxm) with a busy-polled
# completion queue, server on host 1, client on host 0, with libfabric's defaults;
# skipped, with a message, when fi_pingpong is not installed. Prints compare.py's paired table
# against mpi-tcp and writes the medians to results/osu_hosts.csv and
# plots/osu_hosts_{latency,bw}.png under --out (default: benchmarks/osu).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
out="$here"
rounds=6
sizes=(--sizes=1,8,64,512,4096,16384,65536,262144,1048576,4194304)
extra_labels=() extra_args=()
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --sizes=*) sizes=("$a") ;;
        --build=*) build=${a#--build=} ;;
        --out=*) out=${a#--out=} ;;
        [a-z]*=*)
            l=${a%%=*}
            if ! [[ $l =~ ^[a-z][a-z0-9_]*$ ]] || [[ " tcp shm rounds sizes build out " == *" $l "* ]] ||
                [[ " ${extra_labels[*]} " == *" $l "* ]]; then
                echo "run_hosts.sh: $l: a configuration's label is lower-case letters, digits and _," \
                    "not tcp, shm, an option's name (--$l=?) or one given already" >&2
                exit 2
            fi
            extra_labels+=("$l")
            extra_args+=("${a#*=}") ;;
        *) echo "usage: $0 [--rounds=N] [--sizes=N,N,...] [--build=DIR] [--out=DIR] [LABEL=ARGS ...]" >&2
            exit 2 ;;
    esac
done
: "${COURIER_CLUSTER_HOSTFILE:?run it inside tests/cluster/netns-cluster --hosts=2}"
bin="$build/bin"
h0=${COURIER_CLUSTER_PREFIX}h0
h1=${COURIER_CLUSTER_PREFIX}h1
agent=$COURIER_CLUSTER_AGENT
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.stderr"' EXIT
mkdir -p "$out/results" "$out/plots"
mpi=(mpirun --allow-run-as-root --bind-to none --mca plm_rsh_agent "$agent" --mca pml ob1
    --mca oob_tcp_if_include 198.18.0.0/15)
courier=("$bin/courier-run" -n 4 --hostfile="$COURIER_CLUSTER_HOSTFILE" --agent="$agent"
    "$bin/osu_courier" --courier:threads=1 --courier:bind=none --tests=latency,bw "${sizes[@]}")
# fi_pingpong's one-way time (usec/xfer: a round trip over 2) per size, as RESULT lines. Its
# server takes one size per run; the client retries while the server is not listening yet.
fabric_tcp() {
    local r=$1 list=${sizes[0]#--sizes=} s iters line usec
    local ip1
    ip1=$(getent hosts "$h1" | awk '{print $1; exit}')
    [ -n "$ip1" ] || { echo "run_hosts.sh: cannot resolve $h1" >&2; return 1; }
    local prov='tcp;ofi_rxm'
    if fi_info -p net -t FI_EP_RDM > /dev/null 2>&1; then
        prov=net # as parcelport::tcp_provider() chooses
    fi
    for s in ${list//,/ }; do
        # fi_pingpong times its whole run, the connection's set-up (milliseconds) included:
        # enough iterations that it adds under ~3 %.
        iters=2000
        [ "$s" -gt 262144 ] || iters=5000
        [ "$s" -gt 65536 ] || iters=20000
        [ "$s" -gt 8192 ] || iters=50000
        "$agent" "$h1" "timeout 60 fi_pingpong -p '$prov' -e rdm -I $iters -S $s" \
            > /dev/null 2>> "$raw.stderr" &
        local server=$! tries=0
        line=""
        while [ -z "$line" ] && [ $tries -lt 50 ]; do
            sleep 0.1
            line=$(timeout 60 fi_pingpong -p "$prov" -e rdm -I "$iters" -S "$s" "$ip1" 2>> "$raw.stderr" |
                awk 'NF == 8 && $1 != "bytes" { print }')
            tries=$((tries + 1))
        done
        wait "$server" || true
        [ -n "$line" ] || { echo "run_hosts.sh: fi_pingpong at $s B failed" >&2; return 1; }
        usec=$(echo "$line" | awk '{print $7}')
        echo "$r fabric-tcp RESULT libfabric tcp-hosts 1 latency $s $usec" >> "$raw"
    done
}
run_one() {
    local r=$1 label=$2
    local -a cmd
    if [ "$label" = fabric-tcp ]; then
        echo "+ round $r: $label" >&2
        fabric_tcp "$r" || exit 1
        return
    fi
    case $label in
        courier-tcp) cmd=("${courier[@]}" --peer=2 --label=tcp-hosts) ;;
        courier-shm) cmd=("${courier[@]}" --peer=1 --label=shm-host) ;;
        courier-*)
            local i
            local -a extra=()
            for i in "${!extra_labels[@]}"; do
                if [ "courier-${extra_labels[i]}" = "$label" ]; then
                    read -ra extra <<< "${extra_args[i]}" # options split at spaces, no globbing
                fi
            done
            cmd=("${courier[@]}" "${extra[@]}" --peer=2 --label=tcp-hosts) ;;
        mpi-tcp) cmd=("${mpi[@]}" -np 2 --host "$h0,$h1" --mca btl self,tcp
            --mca btl_tcp_if_include 198.18.0.0/15 "$bin/osu_mpi" --label=tcp-hosts
            --tests=latency,bw "${sizes[@]}") ;;
        mpi-shm) cmd=("${mpi[@]}" -np 2 --host "$h0:2" --mca btl self,vader "$bin/osu_mpi"
            --label=shm-host --tests=latency,bw "${sizes[@]}") ;;
    esac
    echo "+ round $r: $label" >&2
    # courier-run prefixes each line with the locality's rank: "[0] RESULT ..."
    if ! timeout 900 "${cmd[@]}" 2>> "$raw.stderr" | sed 's/^\[[0-9]*\] //' |
        grep '^RESULT' | sed "s/^/$r $label /" >> "$raw"; then
        echo "run_hosts.sh: round $r, $label failed; its stderr:" >&2
        tail -n 20 "$raw.stderr" >&2
        exit 1
    fi
}
configs=(mpi-tcp courier-tcp courier-shm mpi-shm)
for l in "${extra_labels[@]}"; do
    configs+=("courier-$l")
done
if command -v fi_pingpong > /dev/null 2>&1; then
    configs+=(fabric-tcp)
else
    echo "run_hosts.sh: fi_pingpong not found (libfabric-bin): no native libfabric baseline" >&2
fi
for r in $(seq 1 "$rounds"); do
    order=("${configs[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        # the reverse order
        order=()
        for ((i = ${#configs[@]} - 1; i >= 0; --i)); do order+=("${configs[i]}"); done
    fi
    for c in "${order[@]}"; do
        run_one "$r" "$c"
    done
done
/usr/bin/python3 "$here/compare.py" "$raw" mpi-tcp
/usr/bin/python3 "$here/plot_hosts.py" "$raw" "$out/results/osu_hosts.csv" "$out/plots"
