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
#   limitador  LIMITADOR, a limitador-server binary, when set (RLS rows only;
#              how to build it: docs/performance.md)
# Edges: RLS ShouldRateLimit and 1-item weir.v1 Check, each allowed and
# denied, h2load with CONNS connections x STREAMS streams.
#
#   bench/syscalls.sh                          # 5 rounds x 4 s per figure
#   OLD=/tmp/weir-old bench/syscalls.sh        # before/after, alternating
#   LIMITADOR=~/limitador/target/release/limitador-server bench/syscalls.sh
#   NODE_THREADS=1 ROUNDS=3 SECS=2 bench/syscalls.sh
#   ONLY=RLS bench/syscalls.sh                 # only the edges whose name matches
#
# Prints one line per figure and then the median of each column per
# server and edge, with the lowest and highest round. Needs h2load
# (nghttp2-client) and perf (linux-perf) with the syscalls tracepoints;
# sends only to 127.0.0.1, every run bounded by SECS.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SECS=${SECS:-4}
CONNS=${CONNS:-8}
STREAMS=${STREAMS:-8}
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
for tool in h2load perf; do
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

declare -A PID GRPC
start_weir() { # name binary base-port extra-flags
    # shellcheck disable=SC2086 # extra flags split on spaces
    RUST_LOG=warn "$2" serve $4 --http "127.0.0.1:$3" --grpc "127.0.0.1:$(($3 + 1))" \
        --gossip "127.0.0.1:$(($3 + 2))" --rules "$REQ/rules.toml" --ui false "${threads[@]}" \
        >"$OUT/$1.log" 2>&1 &
    PID[$1]=$!
    GRPC[$1]=127.0.0.1:$(($3 + 1))
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
    pids+=($!)
    sleep 1
    servers+=(limitador)
fi
for s in "${servers[@]}"; do
    kill -0 "${PID[$s]}" 2>/dev/null || { echo "syscalls.sh: $s did not start; see $OUT/$s.log" >&2; exit 1; }
done

RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
CHECK=/weir.v1.RateLimiter/Check
# name | path | request body
edges=(
    "RLS allowed|$RLS|$REQ/rls-allow.bin"
    "RLS denied|$RLS|$REQ/rls-deny.bin"
    "Check1 allowed|$CHECK|$REQ/check1-allow.bin"
    "Check1 denied|$CHECK|$REQ/check1-deny.bin"
)

h2() { # duration path body address
    h2load -c "$CONNS" -m "$STREAMS" -t 1 -D "$1" \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$3" "http://$4$2" 2>&1
}
# One figure: h2load for SECS on server $1 with perf stat on its process;
# prints req/s, CPU us/req, writev, sendmsg, write and context switches per request.
measure() { # server path body
    local stat=$OUT/perf.csv log ok
    h2 1 "$2" "$3" "${GRPC[$1]}" >/dev/null # warm-up, not counted
    perf stat -x, -o "$stat" -e "$EVENTS" -p "${PID[$1]}" &
    local perf=$!
    sleep 0.2 # perf attaches to every thread before the load starts
    log=$(h2 "$SECS" "$2" "$3" "${GRPC[$1]}")
    kill -INT $perf
    wait $perf || true
    echo "$log" >>"$OUT/raw.log"
    ok=$(awk '/^requests:/ { print $8 }' <<<"$log")
    rps=$(awk '/^finished in/ { gsub(",", "", $4); print $4 }' <<<"$log")
    grep -q '^status codes: .* 0 3xx, 0 4xx, 0 5xx' <<<"$log" || echo "syscalls.sh: $1 $2: HTTP errors" >&2
    awk -F, -v ok="${ok:-0}" -v rps="${rps:-0}" '
        $3 ~ /writev/ { wv = $1 } $3 ~ /sendmsg/ { sm = $1 } $3 ~ /sys_enter_write$/ { w = $1 }
        $3 ~ /futex/ { fx = $1 } $3 == "context-switches" { cs = $1 } $3 == "cpu-clock" { cpu = $1 }
        END {
            if (ok == 0) { print "0 0 0 0 0 0 0"; exit }
            printf "%.0f %.2f %.3f %.3f %.3f %.3f %.3f\n", rps, cpu * 1000 / ok, wv / ok, sm / ok, w / ok, fx / ok, cs / ok
        }' "$stat"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "h2load: $CONNS connections x $STREAMS streams, 1 thread, $SECS s per figure; node threads: ${NODE_THREADS:-default}"
results=$OUT/results.tsv
: >"$results"
printf 'round\tserver\tedge\treq/s\tCPU us/req\twritev/req\tsendmsg/req\twrite/req\tfutex/req\tctxsw/req\n'
for round in $(seq "$ROUNDS"); do
    # Rotate which server goes first, so drift in the host's load falls on each in turn.
    n=${#servers[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${servers[$(((i + round) % n))]}"); done
    for e in "${edges[@]}"; do
        IFS='|' read -r name path body <<<"$e"
        [ -z "$ONLY" ] || grep -qE "$ONLY" <<<"$name" || continue
        for s in "${order[@]}"; do
            [ "$s" = limitador ] && [ "$path" != "$RLS" ] && continue
            r=$(measure "$s" "$path" "$body")
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
