#!/usr/bin/env bash
# What a join costs the checks under way: one `weir serve` holding KEYS
# counters answers 1-item gRPC checks of the same keys, closed loop for
# SECS seconds (8 callers), then open loop at half the rate that reached
# for another SECS; a second member joins JOIN_AT seconds into the open
# loop. Prints the checks refused for now meanwhile (the gateway's
# `weir_decisions_without_owner_total{how="slow"}`), a timeline of them,
# and the open loop's row (docs/cluster.md, "Replicated counters").
#
#   bench/join-load.sh              # a million counters; about a minute
#   JOIN=0 bench/join-load.sh       # the same load, nobody joining
#   KEYS=200000 bench/join-load.sh
#   WEIR=old/weir bench/join-load.sh   # another build of the node
#
# Loopback only: ports 18080-18081 and 17946 (the first member), 28080-28081
# and 27946 (the joiner). Logs and metrics stay in target/join-load/.
set -euo pipefail

KEYS=${KEYS:-1000000}
SECS=${SECS:-10}
JOIN=${JOIN:-1}
JOIN_AT=${JOIN_AT:-3}
OUT=${OUT:-target/join-load}

number='^[0-9]+$'
for v in KEYS SECS JOIN_AT; do
    [[ ${!v} =~ $number ]] && (( ${!v} > 0 )) || { echo "$v: a whole number above 0, got '${!v}'" >&2; exit 1; }
done
(( JOIN_AT < SECS )) || { echo "JOIN_AT ($JOIN_AT) must come before the open loop ends (SECS $SECS)" >&2; exit 1; }
[[ $JOIN == 0 || $JOIN == 1 ]] || { echo "JOIN: 0 or 1, got '$JOIN'" >&2; exit 1; }

cd "$(dirname "$0")/.."
cargo build --release -q -p weir-node --bin weir -p weir-sim --bin weir-bench
mkdir -p "$OUT"
export WEIR_CLUSTER_SECRET=${WEIR_CLUSTER_SECRET:-join-load-bench-secret}
bin=target/release
WEIR=${WEIR:-$bin/weir}

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
serve() { # id http grpc gossip [seed]
    local seeds=()
    [[ -n ${5:-} ]] && seeds=(--seeds "$5")
    RUST_LOG=info "$WEIR" serve --node-id "$1" --http "127.0.0.1:$2" --grpc "127.0.0.1:$3" \
        --gossip "127.0.0.1:$4" "${seeds[@]}" >"$OUT/$1.log" 2>&1 &
    pids+=($!)
}
metric() { # port name
    curl -sf "127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
slow='weir_decisions_without_owner_total{how="slow"}'

serve n1 18080 18081 17946
for _ in $(seq 1 100); do metric 18080 weir_max_keys >/dev/null && break; sleep 0.1; done
echo "filling $KEYS counters"
# Random keys: 15 s of batches reaches nearly every one of a million.
$bin/weir-bench --grpc http://127.0.0.1:18081 --workloads grpc100 --keys "$KEYS" --secs 15 \
    --warmup 0 --concurrency 16 --no-open-loop >"$OUT/fill.txt" 2>&1
echo "held: $(metric 18080 'weir_keys{rule="default-per-client"}')"

$bin/weir-bench --grpc http://127.0.0.1:18081 --workloads grpc1 --keys "$KEYS" --secs "$SECS" \
    --warmup 0 --concurrency 8 >"$OUT/load.txt" 2>&1 &
load=$!
# The open loop follows the closed one.
sleep "$SECS.5"
before=$(metric 18080 "$slow")
sleep "$JOIN_AT"
(( JOIN == 1 )) && serve n2 28080 28081 27946 127.0.0.1:17946
: >"$OUT/timeline.txt"
for i in $(seq 1 $(( (SECS - JOIN_AT) * 2 + 4 ))); do
    kill -0 "$load" 2>/dev/null || break
    echo "$(( i * 500 )) ms  refused so far: $(( $(metric 18080 "$slow") - before ))" >>"$OUT/timeline.txt"
    sleep 0.5
done
wait "$load"
after=$(metric 18080 "$slow")
curl -sf 127.0.0.1:18080/metrics >"$OUT/n1.metrics"
(( JOIN == 1 )) && curl -sf 127.0.0.1:28080/metrics >"$OUT/n2.metrics"

cat "$OUT/timeline.txt"
echo "refused for now during the open loop: $(( after - before ))"
grep '| open loop' "$OUT/load.txt" | cut -d'|' -f3-9
grep -h 'handed counters' "$OUT/n1.log" || true
