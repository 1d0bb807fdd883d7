# SPDX-License-Identifier: BSL-1.0
# Shared by run.sh and run_rma.sh (sourced): their options, and run(), which appends a
# program's RESULT lines to $raw and stops the script if the program fails.
# usage of the scripts: [--quick] [--repeat=N] [--build=DIR] [--out=DIR]
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
build="$here/../../build"
out="$here"
repeat=3
quick=()
for a in "$@"; do
    case "$a" in
        --quick) quick=(--quick); repeat=1 ;;
        --repeat=*) repeat=${a#--repeat=} ;;
        --build=*) build=${a#--build=} ;;
        --out=*) out=${a#--out=} ;;
        *) echo "usage: $0 [--quick] [--repeat=N] [--build=DIR] [--out=DIR]" >&2; exit 2 ;;
    esac
done
bin="$build/bin"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
run() {
    echo "+ $*" >&2
    if ! timeout 900 "$@" | grep '^RESULT' >> "$raw"; then
        echo "FAILED: $*" >&2
        exit 1
    fi
}
