#!/usr/bin/env bash
# Writes host/text-order.txt: the functions a running host executes, most-run first, by the
# names they have in the release binaries (see host/build/text_order.rs for how it is used).
#
# 1. builds the bench with every function's entries counted (`-C profile-generate`) in a
#    target directory of its own, and runs it over `startup`, `idle` and `converge`, whose
#    hosts start, compile and load plugins, converge, resync and idle;
# 2. builds the release `steward` and `steward-bench` as they are linked, and keeps each
#    counted function under every name it has there (a function LLVM promoted across
#    codegen units carries a `.llvm.N` suffix).
#
# Run it again after a dependency or compiler update (an edit to the host keeps its functions'
# names: its crate is one codegen unit in release); `steward-bench idle` prints
# `exe_resident_mib` to show when it is due. About 30 minutes on two cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${STEWARD_TEXT_ORDER_DIR:-$root/target/text-order}
rustup component add llvm-tools >/dev/null
bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"

mkdir -p "$work/prof"
rm -f "$work"/prof/*.profraw
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C profile-generate=$work/prof -C llvm-args=-pgo-instrument-entry" \
    CARGO_TARGET_DIR="$work/target" STEWARD_TEXT_ORDER=off cargo build --release -p steward-bench
rm -f "$work"/prof/*.profraw # the instrumented build scripts' own
"$work/target/release/steward-bench" startup 1 idle 10000 converge 10000
"$bin/llvm-profdata" merge -o "$work/all.profdata" "$work"/prof/*.profraw
"$bin/llvm-profdata" show --all-functions --counts "$work/all.profdata" > "$work/counts.txt"

cargo build --release -p steward -p steward-bench
for exe in target/release/steward target/release/steward-bench; do
    "$bin/llvm-nm" --defined-only "$exe"
done | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u > "$work/linked.txt"

# counts.txt: "  NAME:" (a local function's NAME is "CGU;SYMBOL") then "    Block counts: [..]";
# with -pgo-instrument-entry a function that ran has a count above zero; the largest ranks it,
# and it is written under each of its linked names.
awk -v linked="$work/linked.txt" '
    BEGIN { while ((getline s < linked) > 0) { base = s; sub(/\.llvm\.[0-9]+$/, "", base); names[base] = names[base] " " s } }
    /^  [^ ].*:$/ { fn = substr($0, 3, length($0) - 3); sub(/^[^;]*;/, "", fn) }
    /^    Block counts: \[/ {
        line = $0; gsub(/[^0-9 ]/, " ", line); m = 0; k = split(line, c, " ")
        for (i = 1; i <= k; i++) if (c[i] + 0 > m) m = c[i] + 0
        if (m > 0 && fn in names && !(fn in seen)) {
            seen[fn] = 1; n = split(names[fn], all, " ")
            for (i = 1; i <= n; i++) print m, all[i]
        }
    }
' "$work/counts.txt" | sort -k1,1nr -k2 | cut -d" " -f2 > host/text-order.txt
echo "host/text-order.txt: $(wc -l < host/text-order.txt) functions"
