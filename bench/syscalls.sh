#!/usr/bin/env bash
# The kernel's share of each request, per edge and per server
# (docs/performance.md, "Writes and wake-ups per request"): requests/s,
# server CPU per request, writev/sendmsg/write calls per request, futex
# calls (one thread waking or waiting for another) and context switches
# per request, counted by `perf stat` on the server's
# process while h2load drives the edge.
#
# Servers, each its own process on loopback, measured in turn, the order
# rotating every round:
#   new        WEIR (default target/release/weir), with WEIR_ARGS
#   old        OLD, another build of the node, when set (before/after), with
#              OLD_ARGS; OLD=target/release/weir OLD_ARGS='--grpc-threads 0'
#              sets the node's two runtime layouts side by side
#   limitador  LIMITADOR, a limitador-server binary, when set (the RLS and
#              HTTP/1.1 rows; how to build it: docs/performance.md)
# Edges, each allowed and denied:
#   RLS ShouldRateLimit, 1-item weir.v1 Check   h2load, CONNS connections x STREAMS streams, gRPC port
#   HTTP2: POST /v1/check over h2c               h2load, CONNS x STREAMS, HTTP port, one key
#   HTTP1: POST /v1/check over HTTP/1.1          wrk, 1 thread, WRK_CONNS connections, HTTP port,
#                                                a random key of 100,000 (bench/wrk/check.lua);
#                                                limitador: POST /check_and_report, the same keys
#                                                (bench/wrk/limitador-check.lua)
#
#   bench/syscalls.sh                          # 5 rounds x 4 s per figure
#   OLD=/tmp/weir-old bench/syscalls.sh        # before/after, alternating
#   LIMITADOR=~/limitador/target/release/limitador-server bench/syscalls.sh
#   NODE_THREADS=1 ROUNDS=3 SECS=2 bench/syscalls.sh
#   ONLY=RLS bench/syscalls.sh                 # only the edges whose name matches
#   ONLY=HTTP bench/syscalls.sh                # the HTTP port only, HTTP/2 and HTTP/1.1
#
# Prints one line per figure and then the median of each column per
# server and edge, with the lowest and highest round. Needs h2load
# (nghttp2-client), wrk and perf (linux-perf) with the syscalls tracepoints;
# sends only to 127.0.0.1, every run bounded by SECS.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-4}
CONNS=${CONNS:-8}
STREAMS=${STREAMS:-8}
WRK_CONNS=${WRK_CONNS:-64}
NODE_THREADS=${NODE_THREADS:-}
ONLY=${ONLY:-}
PORT=${PORT:-18180} # new: PORT..PORT+2, old: PORT+10..PORT+12, limitador: PORT+20..PORT+21
OUT=${OUT:-target/syscalls}
OLD=${OLD:-}
WEIR_ARGS=${WEIR_ARGS:-}
OLD_ARGS=${OLD_ARGS:-}
LIMITADOR=${LIMITADOR:-}

cd "$(dirname "$0")/.."
REQ=bench/requests
for tool in h2load wrk perf; do
    command -v "$tool" >/dev/null || { echo "syscalls.sh: $tool is missing" >&2; exit 2; }
done
if [ -z "${WEIR:-}" ]; then
    cargo build --release -q -p weir-node --bin weir
    WEIR=${CARGO_TARGET_DIR:-target}/release/weir
fi
mkdir -p "$OUT"
EVENTS='syscalls:sys_enter_writev,syscalls:sys_enter_sendmsg,syscalls:sys_enter_write,syscalls:sys_enter_futex,context-switches,cpu-clock'

threads=()
[ -n "$NODE_THREADS" ] && threads=(--threads "$NODE_THREADS")
pids=()
stop() {
    [ ${#pids[@]} = 0 ] && return
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 100); do
        local alive=0 p
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && return
        sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}
trap stop EXIT

declare -A PID GRPC HTTP
start_weir() { # name binary base-port extra-flags
    # shellcheck disable=SC2086 # extra flags split on spaces
    RUST_LOG=warn "$2" serve $4 --http "127.0.0.1:$3" --grpc "127.0.0.1:$(($3 + 1))" \
        --gossip "127.0.0.1:$(($3 + 2))" --rules "$REQ/rules.toml" --ui false "${threads[@]}" \
        >"$OUT/$1.log" 2>&1 &
    PID[$1]=$!
    GRPC[$1]=127.0.0.1:$(($3 + 1))
    HTTP[$1]=127.0.0.1:$3
    pids+=($!)
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$3/readyz" && break
        sleep 0.1
    done
}
servers=(new)
start_weir new "$WEIR" "$PORT" "$WEIR_ARGS"
if [ -n "$OLD" ]; then
    start_weir old "$OLD" $((PORT + 10)) "$OLD_ARGS"
    servers+=(old)
fi
if [ -n "$LIMITADOR" ]; then
    # The same budget as bench/requests/rules.toml: domain "bench" admits
    # 10^9 a minute per user_id, "bench-deny" one an hour. Limitador's
    # limits use CEL (its main since 2.0); LIMITADOR_LIMITS names another file.
    limits=${LIMITADOR_LIMITS:-$OUT/limitador.yaml}
    [ -n "${LIMITADOR_LIMITS:-}" ] || cat >"$limits" <<'EOF'
- namespace: bench
  max_value: 1000000000
  seconds: 60
  conditions: []
  variables: ["descriptors[0].user_id"]
- namespace: bench-deny
  max_value: 1
  seconds: 3600
  conditions: []
  variables: ["descriptors[0].user_id"]
EOF
    RUST_LOG=warn "$LIMITADOR" --rls-ip 127.0.0.1 --rls-port $((PORT + 20)) \
        --http-ip 127.0.0.1 --http-port $((PORT + 21)) "$limits" memory >"$OUT/limitador.log" 2>&1 &
    PID[limitador]=$!
    GRPC[limitador]=127.0.0.1:$((PORT + 20))
    HTTP[limitador]=127.0.0.1:$((PORT + 21))
    pids+=($!)
    sleep 1
    servers+=(limitador)
fi
for s in "${servers[@]}"; do
    kill -0 "${PID[$s]}" 2>/dev/null || { echo "syscalls.sh: $s did not start; see $OUT/$s.log" >&2; exit 1; }
done

RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
CHECK=/weir.v1.RateLimiter/Check
# The HTTP/2 rows' bodies: one key each (h2load sends one body).
printf '{"key":"k1","route":"POST /bench","cost":1}' >"$OUT/http-allow.json"
printf '{"key":"k1","route":"bench-deny","cost":1}' >"$OUT/http-deny.json"
# name | how (grpc: h2load on the gRPC port; h2: h2load with JSON on the
# HTTP port; h1: wrk on the HTTP port) | path | request body (h1: the route)
edges=(
    "RLS allowed|grpc|$RLS|$REQ/rls-allow.bin"
    "RLS denied|grpc|$RLS|$REQ/rls-deny.bin"
    "Check1 allowed|grpc|$CHECK|$REQ/check1-allow.bin"
    "Check1 denied|grpc|$CHECK|$REQ/check1-deny.bin"
    "HTTP2 allowed|h2|/v1/check|$OUT/http-allow.json"
    "HTTP2 denied|h2|/v1/check|$OUT/http-deny.json"
    "HTTP1 allowed|h1|/v1/check|POST /bench"
    "HTTP1 denied|h1|/v1/check|bench-deny"
)

h2() { # duration path body address content-type
    h2load -c "$CONNS" -m "$STREAMS" -t 1 -D "$1" \
        -H "content-type: $5" -H 'te: trailers' -d "$3" "http://$4$2" 2>&1
}
# wrk's output in h2load's terms: "requests: N total, N started, N done,
# N succeeded" and "finished in ..., R req/s", and the non-2xx count as 4xx.
h1() { # duration server route
    local script=bench/wrk/check.lua namespace=bench
    [ "$3" = bench-deny ] && namespace=bench-deny
    [ "$2" = limitador ] && script=bench/wrk/limitador-check.lua
    ROUTE=$3 NAMESPACE=$namespace wrk -t1 -c "$WRK_CONNS" -d "${1}s" -s "$script" "http://${HTTP[$2]}" 2>&1 |
        awk '{ print }
            / requests in / { n = $1 }
            /^Requests\/sec:/ { r = $2 }
            /^  Non-2xx or 3xx responses:/ { bad = $5 }
            END { printf "requests: %d total, %d started, %d done, %d succeeded\nfinished in %ss, %s req/s\nstatus codes: %d 2xx, 0 3xx, %d 4xx, 0 5xx\n", n, n, n, n, 0, r, n - bad, bad }'
}
load() { # duration server how path body
    case $3 in
    grpc) h2 "$1" "$4" "$5" "${GRPC[$2]}" application/grpc ;;
    h2) h2 "$1" "$4" "$5" "${HTTP[$2]}" application/json ;;
    h1) h1 "$1" "$2" "$5" ;;
    esac
}
# One figure: the edge's load for SECS on server $1 with perf stat on its
# process; prints req/s, CPU us/req, writev, sendmsg, write, futex and
# context switches per request.
measure() { # server how path body
    local stat=$OUT/perf.csv log ok
    load 1 "$@" >/dev/null # warm-up, not counted
    perf stat -x, -o "$stat" -e "$EVENTS" -p "${PID[$1]}" &
    local perf=$!
    sleep 0.2 # perf attaches to every thread before the load starts
    log=$(load "$SECS" "$@")
    kill -INT $perf
    wait $perf || true
    echo "$log" >>"$OUT/raw.log"
    # Requests answered (an HTTP denial, 429, is no failure here).
    ok=$(awk '/^requests:/ { print $6 }' <<<"$log")
    rps=$(awk '/^finished in/ { gsub(",", "", $4); print $4 }' <<<"$log")
    # gRPC answers a denial with status 200; HTTP with 429.
    local codes='^status codes: .* 0 3xx, 0 4xx, 0 5xx'
    [ "$2" != grpc ] && codes='^status codes: .* 0 5xx'
    grep -q "$codes" <<<"$log" || echo "syscalls.sh: $1 $3: HTTP errors" >&2
    awk -F, -v ok="${ok:-0}" -v rps="${rps:-0}" '
        $3 ~ /writev/ { wv = $1 } $3 ~ /sendmsg/ { sm = $1 } $3 ~ /sys_enter_write$/ { w = $1 }
        $3 ~ /futex/ { fx = $1 } $3 == "context-switches" { cs = $1 } $3 == "cpu-clock" { cpu = $1 }
        END {
            if (ok == 0) { print "0 0 0 0 0 0 0"; exit }
            printf "%.0f %.2f %.3f %.3f %.3f %.3f %.3f\n", rps, cpu * 1000 / ok, wv / ok, sm / ok, w / ok, fx / ok, cs / ok
        }' "$stat"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "h2load: $CONNS connections x $STREAMS streams, 1 thread; wrk: $WRK_CONNS connections, 1 thread; $SECS s per figure; node threads: ${NODE_THREADS:-default}"
results=$OUT/results.tsv
: >"$results"
printf 'round\tserver\tedge\treq/s\tCPU us/req\twritev/req\tsendmsg/req\twrite/req\tfutex/req\tctxsw/req\n'
for round in $(seq "$ROUNDS"); do
    # Rotate which server goes first, so drift in the host's load falls on each in turn.
    n=${#servers[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${servers[$(((i + round) % n))]}"); done
    for e in "${edges[@]}"; do
        IFS='|' read -r name how path body <<<"$e"
        [ -z "$ONLY" ] || grep -qE "$ONLY" <<<"$name" || continue
        for s in "${order[@]}"; do
            # limitador serves RLS and its own HTTP/1.1 API, nothing else here.
            [ "$s" = limitador ] && [ "$path" != "$RLS" ] && [ "$how" != h1 ] && continue
            r=$(measure "$s" "$how" "$path" "$body")
            printf '%s\t%s\t%s\t%s\n' "$round" "$s" "$name" "${r// /$'\t'}" | tee -a "$results"
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "medians over $ROUNDS rounds [lowest-highest]:"
sort -t$'\t' -k3,3 -k2,2 "$results" | awk -F'\t' '
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function flush(   c, i, out, v, lo, hi) {
        if (key == "") return
        out = key
        for (c = 4; c <= 10; c++) {
            delete v; lo = ""; hi = ""
            for (i = 1; i <= n; i++) { v[i] = col[c, i] + 0; if (lo == "" || v[i] < lo) lo = v[i]; if (hi == "" || v[i] > hi) hi = v[i] }
            out = out sprintf("\t%s [%s-%s]", med(v, n), lo, hi)
        }
        print out
    }
    { k = $3 "\t" $2; if (k != key) { flush(); key = k; n = 0 } n++; for (c = 4; c <= 10; c++) col[c, n] = $c }
    END { flush() }' | sed '1i edge\tserver\treq/s\tCPU us/req\twritev/req\tsendmsg/req\twrite/req\tfutex/req\tctxsw/req' | column -t -s$'\t'
