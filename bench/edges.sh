#!/usr/bin/env bash
# Every edge of one weir node against a bare server of the same stack, in
# one run (docs/performance.md, "One node: every edge against its bare
# reference").
#
# Starts `weir serve` and `weir-bare` (bare tonic RLS and RateLimiter, an
# axum check handler, a hand-written HTTP/1.1 responder) as two processes
# on loopback, then for ROUNDS rounds drives each edge on the node and on
# its bare reference back to back, PAIRS times, which goes first alternating:
#   RLS ShouldRateLimit and 1-item weir.v1 Check   h2load, C connections x M streams
#   POST /v1/check                                  wrk, 64 connections; and 1 connection for p50
#   100-item weir.v1 Check                          weir-bench (tonic client), 16 callers,
#                                                   against the plain and the counting reference,
#                                                   and the counting reference against the plain one
# each allowed and denied. It prints every figure, the node/bare ratio of
# each round (the sums over its pairs), the worst and best round and
# whether the worst meets the edge's target (bench/edges-summary.awk), the
# servers' CPU per request, and the load average.
#
#   bench/edges.sh                      # 3 rounds x 2 pairs x 4 s per figure, 10-15 minutes
#   PAIRS=4 SECS=2 bench/edges.sh       # four shorter pairs a round
#   ROUNDS=1 PAIRS=1 SECS=2 bench/edges.sh   # a quick look
#   NODE_THREADS=1 bench/edges.sh       # the node (and the bare servers) on one worker thread
#   WEIR=old/weir bench/edges.sh        # another build of the node against the same references
#   BARE=... BENCH=... bench/edges.sh   # other builds of the references and of the 100-item generator
#   ONLY='p50|RLS' bench/edges.sh       # only the edges whose name matches (grep -E)
#   PROFILE=dist bench/edges.sh         # both sides built as deployed (bench/pgo.sh: profile-guided)
#   P50_CPU= bench/edges.sh             # the one-connection p50 unpinned (pinned to CPU 0 by default)
#
# Needs h2load (Debian: nghttp2-client) and wrk; installs them with apt-get
# when missing and run as root. Sends only to 127.0.0.1; every run is
# bounded by SECS.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
PAIRS=${PAIRS:-2} # node/reference pairs per edge in a round, alternating which goes first
SECS=${SECS:-4}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-8}
STREAMS=${STREAMS:-8}
NODE_THREADS=${NODE_THREADS:-}
ONLY=${ONLY:-}
PORT=${PORT:-18080} # the node takes PORT..PORT+2, the bare servers PORT+10..PORT+13
OUT=${OUT:-target/edges}
PROFILE=${PROFILE:-release} # the cargo profile both sides are built with (dist: Cargo.toml)
P50_CPU=${P50_CPU-0} # the CPU the one-connection p50 runs on, wrk and server both (empty: unpinned)

cd "$(dirname "$0")/.."
REQ=bench/requests
LUA=bench/wrk/check.lua

need() {
    local tool=$1 package=$2
    command -v "$tool" >/dev/null && return
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing $package for $tool" >&2
        apt-get install -y "$package" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "$package" >/dev/null; }
    fi
    command -v "$tool" >/dev/null || { echo "edges.sh: $tool is missing (Debian package $package)" >&2; exit 2; }
}
need h2load nghttp2-client
need wrk wrk
[ -z "$P50_CPU" ] || need taskset util-linux

cargo build --profile "$PROFILE" -q -p weir-node --bin weir -p weir-sim --bin weir-bare --bin weir-bench
TARGET=${CARGO_TARGET_DIR:-target}/$PROFILE
WEIR=${WEIR:-$TARGET/weir} # another build of the node, to compare two
BARE=${BARE:-$TARGET/weir-bare} # another build of the references
BENCH=${BENCH:-$TARGET/weir-bench} # another build of the 100-item generator
mkdir -p "$OUT"

NODE_HTTP=127.0.0.1:$PORT
NODE_GRPC=127.0.0.1:$((PORT + 1))
BARE_HTTP=127.0.0.1:$((PORT + 10))
BARE_GRPC=127.0.0.1:$((PORT + 11))
BARE_RAW=127.0.0.1:$((PORT + 12))
BARE_COUNTING=127.0.0.1:$((PORT + 13))

threads=()
[ -n "$NODE_THREADS" ] && threads=(--threads "$NODE_THREADS")
RUST_LOG=warn "$WEIR" serve --http "$NODE_HTTP" --grpc "$NODE_GRPC" \
    --gossip "127.0.0.1:$((PORT + 2))" --rules "$REQ/rules.toml" --ui false "${threads[@]}" \
    >"$OUT/node.log" 2>&1 &
NODE=$!
RUST_LOG=warn "$BARE" --http "$BARE_HTTP" --grpc "$BARE_GRPC" --raw-http "$BARE_RAW" \
    --grpc-counting "$BARE_COUNTING" \
    --max-secs 7200 "${threads[@]}" >"$OUT/bare.log" 2>&1 &
BARE_PID=$!
# Both leave on SIGTERM (a profiling build writes its profile then:
# bench/pgo.sh); waited for, at most 10 s, so the next run finds the
# ports and the profiles free.
stop() {
    kill $NODE $BARE_PID 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 $NODE 2>/dev/null || kill -0 $BARE_PID 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 $NODE $BARE_PID 2>/dev/null || true
}
trap stop EXIT

for url in "http://$NODE_HTTP/readyz" "http://$BARE_RAW/"; do
    for _ in $(seq 100); do
        curl -s -o /dev/null "$url" -X POST -d '{}' && break
        sleep 0.1
    done
done
# A port taken by something else would be measured in their place.
for p in $NODE $BARE_PID; do
    kill -0 "$p" 2>/dev/null || { echo "edges.sh: a server did not start; see $OUT/node.log and $OUT/bare.log" >&2; exit 1; }
done

# One figure: requests per second of one tool run (and wrk's p50 in us).
h2() { # path file url
    h2load -c "$CONNS" -m "$STREAMS" -t 1 -D "$SECS" --warm-up-time "$WARMUP" \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$2" "http://$3$1" 2>&1 |
        tee -a "$OUT/raw.log" |
        awk '/^finished in/ { gsub(",", "", $4); print $4 } /^requests:/ && $0 !~ / 0 failed/ { print "h2load: failures: " $0 > "/dev/stderr" }'
}
wrk_rps() { # conns route keys url
    ROUTE=$2 KEYS=$3 wrk -t1 -c"$1" -d"${SECS}s" --latency -s "$LUA" "http://$4" 2>&1 |
        tee -a "$OUT/raw.log" | awk '/^Requests\/sec:/ { print $2 }'
}
# One connection's p50, with wrk and the server (all its threads) on one
# CPU, P50_CPU, for the figure: unpinned, where the scheduler happens to
# put the two sets the round trip at about 14, 40 or 85 us on this kind
# of virtual machine (both on one CPU, on two with the other spinning, or
# waking a halted one), whichever the server, and that lottery, not the
# server, decided the row. P50_CPU= (empty) measures unpinned.
wrk_p50() { # route url
    local pid mask pin=()
    if [ -n "$P50_CPU" ]; then
        pid=$(server_of "$2")
        mask=$(taskset -p "$pid" | awk '{ print $NF }')
        taskset -a -p -c "$P50_CPU" "$pid" >/dev/null
        pin=(taskset -c "$P50_CPU")
    fi
    ROUTE=$1 KEYS=100000 "${pin[@]}" wrk -t1 -c1 -d"${SECS}s" --latency -s "$LUA" "http://$2" 2>&1 |
        tee -a "$OUT/raw.log" |
        awk '$1 == "50%" { v = $2; if (v ~ /us$/) { sub("us", "", v); print v } else if (v ~ /ms$/) { sub("ms", "", v); print v * 1000 } }'
    [ -z "$P50_CPU" ] || taskset -a -p "$mask" "$pid" >/dev/null
}
bench100() { # grpc url; checks/s of 100-item calls, 16 callers
    "$BENCH" --grpc "http://$1" --workloads grpc100 --concurrency 16 \
        --secs "$SECS" --warmup "$WARMUP" --no-open-loop 2>&1 | tee -a "$OUT/raw.log" |
        awk -F'|' '/^\| .*gRPC Check, 100 items/ { gsub(/[ ,]/, "", $5); print $5; exit }'
}

RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
CHECK=/weir.v1.RateLimiter/Check
# name | node command | bare command ; "@" stands for the address
edges=(
    "RLS, allowed|h2 $RLS $REQ/rls-allow.bin $NODE_GRPC|h2 $RLS $REQ/rls-allow.bin $BARE_GRPC"
    "RLS, denied|h2 $RLS $REQ/rls-deny.bin $NODE_GRPC|h2 $RLS $REQ/rls-deny.bin $BARE_GRPC"
    "gRPC Check 1 item, allowed|h2 $CHECK $REQ/check1-allow.bin $NODE_GRPC|h2 $CHECK $REQ/check1-allow.bin $BARE_GRPC"
    "gRPC Check 1 item, denied|h2 $CHECK $REQ/check1-deny.bin $NODE_GRPC|h2 $CHECK $REQ/check1-deny.bin $BARE_GRPC"
    "gRPC Check 100 items, allowed|bench100 $NODE_GRPC|bench100 $BARE_GRPC"
    "gRPC Check 100 items vs counting|bench100 $NODE_GRPC|bench100 $BARE_COUNTING"
    # No node here: the counting reference against the plain one, the most
    # any limiter that keeps a counter per item can reach on the row above.
    "100 items, counting vs plain|bench100 $BARE_COUNTING|bench100 $BARE_GRPC"
    "HTTP c=64, allowed|wrk_rps 64 POST_/bench 100000 $NODE_HTTP|wrk_rps 64 POST_/bench 100000 $BARE_HTTP"
    "HTTP c=64, denied|wrk_rps 64 bench-deny 100 $NODE_HTTP|wrk_rps 64 bench-deny 100 $BARE_HTTP"
    "HTTP c=64 vs hand-written|wrk_rps 64 POST_/bench 100000 $NODE_HTTP|wrk_rps 64 POST_/bench 100000 $BARE_RAW"
    "HTTP c=1 p50 (us)|wrk_p50 POST_/bench $NODE_HTTP|wrk_p50 POST_/bench $BARE_HTTP"
)

run() { # a command line from the table, with POST_ standing for "POST "
    local cmd=($1)
    local i
    for i in "${!cmd[@]}"; do cmd[$i]=${cmd[$i]//POST_/POST }; done
    "${cmd[@]}"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
# The process serving a command's address: the bare one for a row that
# puts two references side by side, else the node.
server_of() {
    case $1 in
    *"$BARE_GRPC"* | *"$BARE_COUNTING"* | *"$BARE_HTTP"* | *"$BARE_RAW"*) echo "$BARE_PID" ;;
    *) echo "$NODE" ;;
    esac
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# A figure and the CPU the server (pid $1) used meanwhile, in cores.
measure() {
    local pid=$1 t0 w0 v t1 w1
    t0=$(ticks "$pid"); w0=$(date +%s.%N)
    v=$(run "$2")
    t1=$(ticks "$pid"); w1=$(date +%s.%N)
    echo "$v $(echo "$t0 $t1 $w0 $w1 $(getconf CLK_TCK)" | awk '{ printf "%.2f", ($2 - $1) / $5 / ($4 - $3) }')"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/^Mem:/ { print $2 }') GiB; load before: $(load)"
echo "h2load: $CONNS connections x $STREAMS streams, 1 thread; wrk: 1 thread; ${SECS} s after ${WARMUP} s warm-up per figure; node threads: ${NODE_THREADS:-default}; one-connection p50: $([ -n "$P50_CPU" ] && echo "wrk and server on CPU $P50_CPU" || echo unpinned)"
: >"$OUT/results.tsv"
for round in $(seq "$ROUNDS"); do
    for e in "${edges[@]}"; do
        IFS='|' read -r name node bare <<<"$e"
        [ -z "$ONLY" ] || grep -qE "$ONLY" <<<"$name" || continue
        for pair in $(seq "$PAIRS"); do
            # Node first in odd pairs, the reference first in even ones.
            if [ $(((round + pair) % 2)) = 0 ]; then
                n=$(measure "$(server_of "$node")" "$node"); b=$(measure $BARE_PID "$bare")
            else
                b=$(measure $BARE_PID "$bare"); n=$(measure "$(server_of "$node")" "$node")
            fi
            # round, edge, node figure, bare figure, node cores, bare cores, load
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "${n% *}" "${b% *}" "${n#* }" "${b#* }" "$(load)" |
                tee -a "$OUT/results.tsv"
        done
    done
done
echo "load after: $(load)"

# One line per edge: the worst and best round, whether the worst meets
# the edge's target, and each round's figures; then the CPU per request.
awk -F'\t' -f bench/edges-summary.awk "$OUT/results.tsv"
echo
echo "node counts (every check above allowed or denied, none invalid or unavailable):"
counts=$(curl -s "http://$NODE_HTTP/metrics" | grep '^weir_checks_total')
echo "$counts"
failed=$(awk '/verdict="(invalid|unavailable)"/ { s += $NF } END { print s + 0 }' <<<"$counts")
[ "$failed" = 0 ] || { echo "edges.sh: the node answered $failed checks invalid or unavailable: the figures above are not of its decisions" >&2; exit 1; }
