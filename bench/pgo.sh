#!/usr/bin/env bash
# A profile-guided build of the node and the benchmark binaries
# (docs/performance.md, "The profile-guided build").
#
# Builds `weir`, `weir-bare` and `weir-bench` instrumented, runs a short
# bench/edges.sh on that build so each server records where it spends its
# time (the node and the bare references on the same edges, alike) and a
# short forwarded run on a 3-node cluster, merges
# the profiles with llvm-profdata, and builds the three again with them.
# Then runs the command given, if any, against the optimized build, with
# the environment that makes its `cargo build` a no-op:
#
#   bench/pgo.sh                    # the build alone, into target/pgo; ~14 minutes (dist: ~19)
#   bench/pgo.sh bench/edges.sh     # then every edge on it, node and references both optimized
#   PROFILE=dist bench/pgo.sh       # on the deployable build (Cargo.toml's dist profile)
#   PGO_OUT=target/pgo-dist ...     # another directory for the builds and the profile
#
# The profile is of these edges on one node and of the forwarded path on
# a 3-node cluster (`weir-bench --forwarded`, short): code neither runs
# (a handoff, a partition, the regions) is laid out as cold. Needs
# llvm-profdata of rustc's LLVM major version: rustup's llvm-tools
# component, or Debian's llvm-<major> (installed with apt-get when missing
# and run as root). Sends only to 127.0.0.1, as edges.sh does.
set -euo pipefail

PGO_OUT=${PGO_OUT:-target/pgo}
PROFILE=${PROFILE:-release} # dist: whole-program optimization too, as deployed

cd "$(dirname "$0")/.."
mkdir -p "$PGO_OUT"
PGO_OUT=$(cd "$PGO_OUT" && pwd)

major=$(rustc -vV | awk '/^LLVM version:/ { split($3, v, "."); print v[1] }')
profdata() {
    local sysroot candidate
    sysroot=$(rustc --print sysroot)
    for candidate in "$sysroot"/lib/rustlib/*/bin/llvm-profdata "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata"; do
        command -v "$candidate" >/dev/null 2>&1 && { echo "$candidate"; return; }
    done
    return 1
}
if ! PROFDATA=$(profdata); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing llvm-$major for llvm-profdata" >&2
        apt-get install -y "llvm-$major" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "llvm-$major" >/dev/null; }
    fi
    PROFDATA=$(profdata) || {
        echo "pgo.sh: no llvm-profdata for LLVM $major (rustup component add llvm-tools, or Debian's llvm-$major)" >&2
        exit 2
    }
fi

build() { # target dir, rustflags
    CARGO_TARGET_DIR=$1 RUSTFLAGS=$2 cargo build --profile "$PROFILE" -q \
        -p weir-node --bin weir -p weir-sim --bin weir-bare --bin weir-bench
}

raw=$PGO_OUT/raw
rm -rf "$raw"
echo "building instrumented (target dir $PGO_OUT/gen)" >&2
build "$PGO_OUT/gen" "-Cprofile-generate=$raw"
echo "training: a short bench/edges.sh on the instrumented build" >&2
# Both servers leave on SIGTERM, writing their profiles as they go.
# Every edge on the instrumented node, whatever ONLY, WEIR, BARE, BENCH or
# NODE_THREADS the command after it is given.
CARGO_TARGET_DIR=$PGO_OUT/gen RUSTFLAGS="-Cprofile-generate=$raw" PROFILE=$PROFILE \
    ROUNDS=1 PAIRS=1 SECS=2 ONLY= WEIR= BARE= BENCH= NODE_THREADS= OUT=$PGO_OUT/train bench/edges.sh >"$PGO_OUT/train.log" 2>&1 ||
    { echo "pgo.sh: the training run failed; see $PGO_OUT/train.log" >&2; exit 1; }
echo "training: the forwarded path on a 3-node cluster of the instrumented node" >&2
# Forwarding, the peer service, replication and gossip, which one node
# never runs; weir-bench stops the nodes with SIGTERM, so each writes its
# profile.
"$PGO_OUT/gen/$PROFILE/weir-bench" --spawn "$PGO_OUT/gen/$PROFILE/weir" --forwarded \
    --secs 2 --warmup 1 >"$PGO_OUT/train-forwarded.log" 2>&1 ||
    { echo "pgo.sh: the forwarded training run failed; see $PGO_OUT/train-forwarded.log" >&2; exit 1; }
# A server killed rather than stopped writes nothing.
compgen -G "$raw/*.profraw" >/dev/null ||
    { echo "pgo.sh: the training run wrote no profile to $raw" >&2; exit 1; }
"$PROFDATA" merge -o "$PGO_OUT/merged.profdata" "$raw"/*.profraw
# Named by its contents: cargo rebuilds when the flags change, and a
# new profile under the same name would leave the last build in place.
profile=$PGO_OUT/weir-$(sha256sum "$PGO_OUT/merged.profdata" | cut -c1-16).profdata
rm -f "$PGO_OUT"/weir-*.profdata
mv "$PGO_OUT/merged.profdata" "$profile"
echo "building with the profile (target dir $PGO_OUT)" >&2
use="-Cprofile-use=$profile"
build "$PGO_OUT" "$use"
echo "optimized: $PGO_OUT/$PROFILE/weir, weir-bare, weir-bench" >&2

if [ $# -gt 0 ]; then
    CARGO_TARGET_DIR=$PGO_OUT RUSTFLAGS=$use PROFILE=$PROFILE "$@"
fi
