#!/usr/bin/env bash
# A flood of new keys into a rule's table at its ceiling, and what one
# caller's checks of a held key see meanwhile (docs/performance.md, "A flood
# of new keys at the ceiling").
#
# Starts `weir serve` at the default --max-keys (1,000,000) with a rule
# "flood" (token bucket of 100 a 100 s, so a key spent at cost c rests c
# seconds later) and sends it new keys from 32 connections for FLOOD
# seconds, each at a cost between 30 and 90: the table fills within about
# 15 s, its first keys come to rest 30 s in, and from then on keys come to
# rest spread over a minute, slower than the flood sends new ones, so the
# table stays full and new keys must sweep it for room. One connection
# checks one key of another rule meanwhile, twice:
#   full, none at rest    15-30 s: every new key refused with no scan
#   full, keys at rest    40-60 s: new keys sweep the table for room
# and the script prints each probe's latency, the flood's totals and, every
# 5 s, the flood table's keys, drops and refusals.
#
#   bench/ceiling-flood.sh                    # about 80 s
#   WEIR=old/weir bench/ceiling-flood.sh      # another build of the node
#
# Needs wrk (Debian: wrk). Sends only to 127.0.0.1; every run is bounded.
set -euo pipefail

WEIR=${WEIR:-target/release/weir}
PORT=${PORT:-18080}
FLOOD=${FLOOD:-65}
cd "$(dirname "$0")/.."
[ -x "$WEIR" ] || cargo build --release -p weir-node --bin weir
dir=$(mktemp -d)
cat > "$dir/rules.toml" <<'R'
[[rule]]
name      = "flood"
route     = "flood"
algorithm = "token_bucket"
limit     = 100
window    = "100s"

[[rule]]
name      = "bench"
algorithm = "sliding_window_counter"
limit     = 1000000000
window    = "60s"
R
RUST_LOG=warn "$WEIR" serve --http "127.0.0.1:$PORT" --grpc "127.0.0.1:$((PORT + 1))" \
    --gossip "127.0.0.1:$((PORT + 2))" --rules "$dir/rules.toml" --ui false > "$dir/node.log" 2>&1 &
node=$!
trap 'kill $node $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$PORT/healthz" > /dev/null 2>&1 && break
    sleep 0.1
done

metrics() {
    curl -s "http://127.0.0.1:$PORT/metrics" |
        grep -E '^weir_keys(\{rule="flood"\}|_dropped_at_rest_total|_refused_total)' | tr '\n' ' '
}
probe() {
    echo "== $1"
    KEYS=1 wrk -t1 -c1 -d"$2s" --latency -s bench/wrk/check.lua "http://127.0.0.1:$PORT" |
        grep -E "Requests/sec|50%|99%|Latency  "
}

ROUTE=flood COST_MIN=30 COST_MAX=90 wrk -t1 -c32 -d"${FLOOD}s" -s bench/wrk/new-keys.lua \
    "http://127.0.0.1:$PORT" > "$dir/flood.out" 2>&1 &
flood=$!
(for i in $(seq $((FLOOD / 5))); do
    sleep 5
    echo "t=$((i * 5))s $(metrics)"
done > "$dir/samples") &
sleep 15
probe "full, none at rest (15-30 s)" 15
sleep 10
probe "full, keys at rest (40-60 s)" 20
wait $flood
echo "== the flood"
grep -E "requests in|Requests/sec|Non-2xx" "$dir/flood.out"
cat "$dir/samples"
