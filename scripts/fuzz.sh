#!/usr/bin/env bash
# Runs terra's fuzz targets (fuzz/, its own cargo workspace) with cargo-fuzz.
#
#   FUZZ_SECONDS=60 scripts/fuzz.sh            # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh mir_decoder
#
# The toolchain is stable; cargo-fuzz needs nightly flags, so this sets
# RUSTC_BOOTSTRAP=1. Sanitizers are tried first (address); when the toolchain
# cannot build them, FUZZ_SANITIZER=none is used. Crashes land in
# fuzz/artifacts/<target>/ and make the script exit non-zero.
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-address}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(source_parser mir_decoder netd_request netd_client_hello netd_dns_response netd_dns_query seatbelt_launch_spec appcontainer_launch_spec vm_control)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz build -O -s "$sanitizer" >/dev/null 2>&1; then
    echo "fuzz.sh: building with sanitizer '$sanitizer' failed; using -s none" >&2
    sanitizer=none
    cargo fuzz build -O -s none
fi

status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "fuzz.sh: $target for ${seconds}s (sanitizer: $sanitizer)" >&2
    dict=()
    if [ -f "dicts/$target.dict" ]; then
        dict=("-dict=dicts/$target.dict")
    fi
    if ! cargo fuzz run -O -s "$sanitizer" "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -max_len=1048577 -print_final_stats=1 "${dict[@]}"; then
        echo "fuzz.sh: $target found a failure; see fuzz/artifacts/$target/" >&2
        status=1
    fi
done
exit "$status"
