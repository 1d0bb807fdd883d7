#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Paired comparison of Courier configurations with each other and with the baselines, for a
# shared, noisy machine: each round runs every configuration once, one after the other, and
# compare.py takes each configuration's ratio to the base within the round, then the median
# over the rounds (and the geometric mean, and in how many rounds it was ahead).
# usage: benchmarks/osu/compare.sh [--rounds=N] [--provider=tcp|shm] [--tests=bw] [--pairs=N]
#            [--min-size=BYTES] [--max-size=BYTES] [--sizes=N,N,...] [--threads=N] [--base=LABEL] [--build=DIR]
#            [--scale=N] [--raw=FILE] CONFIG...
#   --scale=N: every configuration (the baselines too) runs N times OSU's iteration counts, for
#   measurements long enough to be steady (OSU's 10 windows of 64 messages of 128 KiB take
#   ~40 ms); it overrides a --scale in a CONFIG's ARGS.
#   CONFIG: mpi (osu_mpi: OpenMPI over self,tcp or self,vader), native (osu_fabric),
#   native+distinct, native+push or native+multi (osu_fabric --distinct / --push: bw, bibw
#   and mr; --multi: bw and mr), or
#   LABEL=ARGS: osu_courier under courier-run with the --courier: options in ARGS (other
#   options in ARGS, such as --latency=echo or --buffer=rma_vector, go to osu_courier), e.g.
#   old="--courier:read_piece=1048576 --courier:read_budget=16777216", or new= (the defaults);
#   LABEL@DIR=ARGS: the same with the courier-run and osu_courier binaries in DIR (another
#   build: old and new code in the same rounds). ARGS with --courier:parcelport=mpi run under
#   mpirun instead (the MPI parcelport over the mpi baseline's BTL), e.g.
#   mpipp="--courier:parcelport=mpi";
#   mpi/LABEL=ARGS: osu_mpi as the mpi baseline runs it, with ARGS (e.g. --window=512),
#   reported as LABEL.
#   --pairs=N (with --tests=mr): N sending and N receiving processes; native runs one pair
#   only, so it is left out (said on stderr) when N > 1.
# The message rate in benchmarks/RESULTS.md runs like
#   benchmarks/osu/compare.sh --provider=shm --tests=mr --max-size=65536 --pairs=1 courier= \
#       native mpi
# The tcp read piece and budget comparison in benchmarks/RESULTS.md runs like
#   benchmarks/osu/compare.sh --rounds=16 new= old="--courier:read_piece=1048576
#       --courier:read_budget=16777216" mpi
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
rounds=8
provider=tcp
tests=bw
threads=1
pairs=1
base=
raw=
sizes=()
configs=()
for a in "$@"; do
    case "$a" in
        --rounds=*) rounds=${a#--rounds=} ;;
        --provider=*) provider=${a#--provider=} ;;
        --tests=*) tests=${a#--tests=} ;;
        --threads=*) threads=${a#--threads=} ;;
        --pairs=*) pairs=${a#--pairs=} ;;
        --min-size=* | --max-size=* | --sizes=* | --scale=*) sizes+=("$a") ;;
        --base=*) base=${a#--base=} ;;
        --build=*) build=${a#--build=} ;;
        --raw=*) raw=${a#--raw=} ;;
        --*) echo "compare.sh: unknown option $a (see the usage at the top)" >&2; exit 2 ;;
        *) configs+=("$a") ;;
    esac
done
if [ ${#configs[@]} -lt 2 ]; then
    echo "compare.sh: give at least two configurations (see the usage at the top)" >&2
    exit 2
fi
case "$provider" in
    tcp) btl=self,tcp ;;
    shm) btl=self,vader ;;
    *) echo "compare.sh: --provider must be tcp or shm" >&2; exit 2 ;;
esac
bin="$build/bin"
keep_raw=1
[ -n "$raw" ] || { raw=$(mktemp); keep_raw=0; }
: > "$raw"
: > "$raw.stderr"
mpi_root=()
[ "$(id -u)" = 0 ] && mpi_root=(--allow-run-as-root)
mpi_bind=(--bind-to core)
if [ $((2 * pairs)) -gt "$(nproc)" ]; then # more processes than cores: they share them
    mpi_bind=(--oversubscribe --bind-to none)
fi
# One run of one configuration: its RESULT lines, prefixed with the round and the label.
run_one() {
    local r=$1 spec=$2 label args run_tests=$tests
    local -a cmd
    case "$spec" in
        mpi)
            label=mpi
            cmd=(mpirun "${mpi_root[@]}" -np $((2 * pairs)) "${mpi_bind[@]}" --mca pml ob1 --mca btl "$btl"
                --mca btl_tcp_if_include lo "$bin/osu_mpi" --label="$provider") ;;
        mpi/*=*)
            label=${spec%%=*}
            label=${label#mpi/}
            args=${spec#*=}
            # shellcheck disable=SC2206 # the options are meant to split at spaces
            cmd=(mpirun "${mpi_root[@]}" -np $((2 * pairs)) "${mpi_bind[@]}" --mca pml ob1 --mca btl "$btl"
                --mca btl_tcp_if_include lo "$bin/osu_mpi" --label="$provider" $args) ;;
        native | native+distinct | native+push | native+multi)
            label=$spec
            if [ "$pairs" != 1 ]; then
                [ "$r" != 1 ] || echo "compare.sh: native runs one pair only: left out" >&2
                return 0
            fi
            cmd=("$bin/osu_fabric" --provider="$provider")
            [ "$spec" = native ] || cmd+=("--${spec#native+}")
            # --push runs bw, bibw and mr, --multi bw and mr: the others are left out.
            local keep t
            case $spec in
                native+push) keep=" bw bibw mr " ;;
                native+multi) keep=" bw mr " ;;
                *) keep="" ;;
            esac
            if [ -n "$keep" ]; then
                local kept=""
                for t in ${run_tests//,/ }; do
                    [[ $keep == *" $t "* ]] && kept+=${kept:+,}$t
                done
                if [ -z "$kept" ]; then
                    [ "$r" != 1 ] || echo "compare.sh: $spec runs none of $tests: left out" >&2
                    return 0
                fi
                run_tests=$kept
            fi ;;
        *=*)
            label=${spec%%=*}
            args=${spec#*=}
            local dir=$bin
            if [[ $label == *@* ]]; then
                dir=${label#*@}
                label=${label%%@*}
            fi
            if [[ " $args " == *" --courier:parcelport=mpi "* ]]; then
                # The MPI parcelport runs under mpirun, over the BTL the mpi baseline uses;
                # Courier places its workers itself, as under courier-run.
                # shellcheck disable=SC2206 # the options are meant to split at spaces
                cmd=(mpirun "${mpi_root[@]}" -np $((2 * pairs)) --oversubscribe --bind-to none
                    --mca pml ob1 --mca btl "$btl" --mca btl_tcp_if_include lo
                    "$dir/osu_courier" --label="$provider" --courier:threads="$threads" $args)
            else
                # --courier: options go to courier-run, the others (e.g. --latency=echo) to
                # osu_courier.
                local -a copts=() pargs=()
                local a
                # shellcheck disable=SC2086 # the options are meant to split at spaces
                for a in $args; do
                    if [[ $a == --courier:* ]]; then copts+=("$a"); else pargs+=("$a"); fi
                done
                cmd=("$dir/courier-run" -n $((2 * pairs)) --courier:provider="$provider"
                    --courier:threads="$threads" "${copts[@]}" "$dir/osu_courier" "${pargs[@]}")
            fi ;;
        *) echo "compare.sh: $spec is neither mpi, mpi/LABEL=ARGS, native[+distinct|+push|+multi] nor LABEL=ARGS" >&2
            exit 2 ;;
    esac
    if ! timeout 900 "${cmd[@]}" --tests="$run_tests" "${sizes[@]}" 2>> "$raw.stderr" |
        grep '^RESULT' | sed "s/^/$r $label /" >> "$raw"; then
        echo "compare.sh: round $r, $label failed: ${cmd[*]} (its stderr: $raw.stderr)" >&2
        exit 1
    fi
}
# TCP's congestion control shapes tcp bandwidth within a host: with BBR, which paces to the
# delivery rate it measures, single messages just over 192 KiB ran at half the rate of ones
# just under, where cubic (Linux's default) ran both at full rate (benchmarks/RESULTS.md,
# Known limits). Said with every tcp run, so that its figures say what they were measured under.
if [ "$provider" = tcp ] && [ -r /proc/sys/net/ipv4/tcp_congestion_control ]; then
    echo "compare.sh: tcp congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
fi
# Round r starts at configuration (r - 1) / 2 (mod their number) and every other round runs
# them in reverse: whichever runs second in a round was measured faster (a warmer machine),
# and with three or more configurations reversing alone would keep the middle ones in the
# middle. Over 2 x N rounds each configuration runs once in every position, each way.
n=${#configs[@]}
for r in $(seq 1 "$rounds"); do
    shift_by=$((((r - 1) / 2) % n))
    order=()
    for ((i = 0; i < n; i++)); do order+=("${configs[$(((i + shift_by) % n))]}"); done
    if [ $((r % 2)) -eq 0 ]; then
        reversed=()
        for ((i = n - 1; i >= 0; i--)); do reversed+=("${order[$i]}"); done
        order=("${reversed[@]}")
    fi
    for c in "${order[@]}"; do
        run_one "$r" "$c"
    done
done
first=${configs[0]%%=*}
first=${first%%@*}
first=${first#mpi/}
/usr/bin/python3 "$here/compare.py" "$raw" "${base:-$first}"
[ $keep_raw = 1 ] || rm -f "$raw" "$raw.stderr" # a failed run keeps them for its message
