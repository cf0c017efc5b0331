#!/usr/bin/env bash
# The kernel's share of each forwarded check (docs/performance.md, "The
# forwarded path at half load"): runs `weir-bench --forwarded`, and over
# SECS seconds of its open-loop forwarded phase counts with `perf stat`,
# per node process, the socket writes (writev + sendmsg + sendto), the
# `write` calls, futex calls, context switches and CPU time, each divided by the forwarded checks sent
# in that time (the open-loop rate x SECS). Node 1 is the gateway the
# checks are sent to; nodes 2 and 3 own the keys. hyper writes with
# writev, the direct peer connections with send (the sendto call); a
# plain `write` on these servers goes to a runtime's event fd, one thread
# waking another (strace -e write shows no other), so it is printed as
# "wakes".
#
#   bench/forwarded-syscalls.sh                          # 5 rounds, new build alone, about 5 minutes
#   OLD_ARGS=--grpc-threads=0 bench/forwarded-syscalls.sh # the same build with other node flags, alternating
#   OLD=/tmp/weir-old bench/forwarded-syscalls.sh        # another build of the node, alternating
#   ROUNDS=1 LOAD=0.1 bench/forwarded-syscalls.sh        # another share of the saturating rate
#
# With OLD or OLD_ARGS, each round runs both ("new" then "old", or the
# other way round on even rounds). Each run prints its open-loop rate,
# the forwarded p50 / p99 from sent, and the counts; the medians over
# the rounds follow. Needs perf (Debian: linux-perf) with the syscalls
# tracepoints; the bench sends only to 127.0.0.1 and every phase is
# bounded by its --secs.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
LOAD=${LOAD:-0.5}
SECS=${SECS:-3}
OUT=${OUT:-target/forwarded-syscalls}
NEW_ARGS=${NEW_ARGS:-}
OLD=${OLD:-}
OLD_ARGS=${OLD_ARGS:-}

# shellcheck source=bench/forwarded-phase.sh
source "$(dirname "$0")/forwarded-phase.sh"
TARGET=${CARGO_TARGET_DIR:-target}/release
WEIR=${WEIR:-$TARGET/weir}
BENCH=$TARGET/weir-bench
mkdir -p "$OUT"
EVENTS='syscalls:sys_enter_writev,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_futex,context-switches,cpu-clock'

bench=
perfs=()
cleanup() {
    [ ${#perfs[@]} = 0 ] || kill -INT "${perfs[@]}" 2>/dev/null || true
    [ -z "$bench" ] || kill "$bench" 2>/dev/null || true
}
trap cleanup EXIT

# One run: prints "rate p50 p99" and per node "sends wakes futex ctxsw
# cpu_us" per forwarded check, tab-separated.
run() { # name binary node-args
    local log=$OUT/$1.txt node_args=() a
    for a in $3; do node_args+=("--node-arg=$a"); done
    "$BENCH" --spawn "$2" --forwarded --forwarded-load "$LOAD" --warmup "$WARMUP" --secs "$PHASE" \
        "${node_args[@]}" >"$log" 2>&1 &
    bench=$!
    # The forwarded phase is the first after this line; counting starts
    # half a second past its warm-up.
    for _ in $(seq 600); do
        grep -q '^open loop at [0-9]' "$log" && break
        kill -0 $bench 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.2
    done
    sleep "$(awk -v w="$WARMUP" 'BEGIN { print w + 0.5 }')"
    # The bench's own children only, not another cluster on the same host.
    local p id nodes=()
    for p in $(pgrep -P "$bench" -f 'weir serve --node-id'); do
        id=$(tr '\0' ' ' <"/proc/$p/cmdline" | sed -n 's/.*--node-id \([^ ]*\).*/\1/p')
        nodes+=("$id=$p")
    done
    perfs=()
    for a in "${nodes[@]}"; do
        perf stat -x, -o "$OUT/perf-${a%%=*}.csv" -e "$EVENTS" -p "${a#*=}" &
        perfs+=($!)
    done
    sleep "$SECS"
    kill -INT "${perfs[@]}" 2>/dev/null || true
    wait "${perfs[@]}" 2>/dev/null || true
    perfs=()
    wait $bench || { cat "$log" >&2; exit 1; }
    bench=
    local rate fwd
    rate=$(sed -n 's/^open loop at \([0-9,]*\) checks.*/\1/p' "$log" | tr -d ,)
    fwd=$(grep '^forwarded (keys' "$log")
    printf '%s\t%s\t%s' "$rate" \
        "$(sed -n 's/.*from sent: p50 \([^ ,]*\).*/\1/p' <<<"$fwd")" \
        "$(sed -n 's/.*from sent: p50 [^,]*, p99 \([^ ,]*\).*/\1/p' <<<"$fwd")"
    for a in $(printf '%s\n' "${nodes[@]}" | sort); do
        awk -F, -v n="$(awk -v r="$rate" -v s="$SECS" 'BEGIN { print r * s }')" '
            $3 ~ /writev|sendmsg|sendto/ { sends += $1 } $3 ~ /sys_enter_write$/ { w = $1 }
            $3 ~ /futex/ { fx = $1 } $3 == "context-switches" { cs = $1 } $3 == "cpu-clock" { cpu = $1 }
            END { printf "\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f", sends / n, w / n, fx / n, cs / n, cpu * 1000 / n }' \
            "$OUT/perf-${a%%=*}.csv"
    done
    echo
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "forwarded phase at ${LOAD} of the saturating rate; $SECS s counted per run"
servers=(new)
[ -n "$OLD$OLD_ARGS" ] && servers+=(old)
results=$OUT/results.tsv
: >"$results"
printf 'round\tbuild\tchecks/s\tp50\tp99'
for n in 1 2 3; do printf '\tnode%s sends\twakes\tfutex\tctxsw\tCPU us' "$n"; done
echo
for round in $(seq "$ROUNDS"); do
    order=("${servers[@]}")
    [ $((round % 2)) = 0 ] && [ ${#servers[@]} = 2 ] && order=(old new)
    for s in "${order[@]}"; do
        if [ "$s" = new ]; then r=$(run new "$WEIR" "$NEW_ARGS"); else r=$(run old "${OLD:-$WEIR}" "$OLD_ARGS"); fi
        printf '%s\t%s\t%s\n' "$round" "$s" "$r" | tee -a "$results"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "medians over $ROUNDS rounds (per forwarded check; p50/p99 from sent):"
printf 'build\tchecks/s\tp50\tp99'
for n in 1 2 3; do printf '\tnode%s sends\twakes\tfutex\tctxsw\tCPU us' "$n"; done
echo
for s in "${servers[@]}"; do
    awk -F'\t' -v s="$s" '
        function v(x) { return x + 0 }
        function med(c,   n, i, j, t, a) {
            n = 0; for (i = 1; i <= rows; i++) a[++n] = v(col[c, i])
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        $2 == s { rows++; for (c = 3; c <= NF; c++) col[c, rows] = $c; nf = NF }
        END {
            out = s
            for (c = 3; c <= nf; c++) out = out "\t" med(c) (c == 4 || c == 5 ? " us" : "")
            print out
        }' "$results"
done
