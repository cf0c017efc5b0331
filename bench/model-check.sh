#!/usr/bin/env bash
# Checks the cluster model (docs/performance.md, "Past one machine") where
# this machine allows: two `weir serve` nodes, each pinned to a core of
# its own with taskset, one wrk per node (unpinned, measured apart) sending
# checks of spread keys, so half of each node's checks are forwarded to the
# other. Prints the measured checks/s and CPU per check beside what the
# model predicts at the CPU the nodes got.
#
#   bench/model-check.sh            # 5 s, 32 connections per node
#   SECS=10 CONNS=64 bench/model-check.sh
#
# The model's per-check costs are weir-bench's defaults (measured by
# `weir-bench --spawn target/release/weir --forwarded`); pass others in
# MODEL_ARGS, e.g. MODEL_ARGS="--edge-us 20 --gateway-call-us 60".
# Loopback only; bounded by SECS.
set -euo pipefail

SECS=${SECS:-5}
CONNS=${CONNS:-32}
PORT=${PORT:-18300}
MODEL_ARGS=${MODEL_ARGS:-}
OUT=${OUT:-target/model-check}

cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "model-check.sh: wrk is missing (Debian package wrk)" >&2; exit 2; }
command -v taskset >/dev/null || { echo "model-check.sh: taskset is missing (Debian package util-linux)" >&2; exit 2; }
cargo build --release -q -p weir-node --bin weir -p weir-sim --bin weir-bench
TARGET=${CARGO_TARGET_DIR:-target}/release
mkdir -p "$OUT"
export WEIR_CLUSTER_SECRET=model-check-$$

node() { # index cpu seeds...
    local i=$1 cpu=$2
    shift 2
    RUST_LOG=warn taskset -c "$cpu" "$TARGET/weir" serve --node-id "n$i" \
        --http "127.0.0.1:$((PORT + 10 * i))" --grpc "127.0.0.1:$((PORT + 10 * i + 1))" \
        --gossip "127.0.0.1:$((PORT + 10 * i + 2))" --rules bench/requests/rules.toml --ui false "$@" \
        >"$OUT/n$i.log" 2>&1 &
    echo $!
}
A=$(node 1 0)
B=$(node 2 1 --seeds "127.0.0.1:$((PORT + 12))")
trap 'kill $A $B 2>/dev/null || true' EXIT
for _ in $(seq 150); do
    n=$(curl -s "http://127.0.0.1:$((PORT + 10))/v1/cluster" | grep -o '"state":"alive"' | wc -l || true)
    [ "$n" = 2 ] && break
    sleep 0.2
done
[ "$n" = 2 ] || { echo "model-check.sh: the two nodes did not form a cluster" >&2; exit 1; }

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
a0=$(ticks "$A"); b0=$(ticks "$B"); w0=$(date +%s.%N)
for i in 1 2; do
    KEYS=100000 wrk -t1 -c"$CONNS" -d"${SECS}s" -s bench/wrk/check.lua "http://127.0.0.1:$((PORT + 10 * i))" >"$OUT/wrk$i.txt" 2>&1 &
done
wait %1 %2 2>/dev/null || wait
a1=$(ticks "$A"); b1=$(ticks "$B"); w1=$(date +%s.%N)
rate=$(awk '/^Requests\/sec:/ { s += $2 } END { printf "%.0f", s }' "$OUT"/wrk1.txt "$OUT"/wrk2.txt)
read -r cores_a cores_b per_check < <(echo "$a0 $a1 $b0 $b1 $w0 $w1 $hz $rate" |
    awk '{ t = $6 - $5; a = ($2 - $1) / $7 / t; b = ($4 - $3) / $7 / t; printf "%.3f %.3f %.1f\n", a, b, (a + b) / $8 * 1e6 }')
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in 1 2; do
    curl -s "http://127.0.0.1:$((PORT + 10 * i))/metrics" | grep -E "^weir_(checks_total|fallback_decisions|deny_cache|decisions_without|reconciled|peer_failures|peer_calls|peer_ops|keys_refused|breaker)" | sed "s/^/n$i: /"
done
echo "measured: $rate checks/s over 2 nodes; node CPU $cores_a + $cores_b cores; $per_check us of node CPU per check"
cores=$(echo "$cores_a $cores_b" | awk '{ printf "%.3f", ($1 > $2 ? $1 : $2) }')
# shellcheck disable=SC2086
"$TARGET/weir-bench" --model --cores "$cores" --check-nodes 2 --check-rate "$rate" $MODEL_ARGS | tail -3
