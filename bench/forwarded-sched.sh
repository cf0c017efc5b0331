#!/usr/bin/env bash
# How long each process of the forwarded bench waits for a core: runs
# `weir-bench --forwarded`, records the scheduler (`perf sched record`)
# for SECS seconds of its open-loop forwarded phase, and prints per process
# its CPU time and the delay from each wake-up (or preemption) of one of
# its threads to that thread running again (docs/performance.md, "Where a
# forwarded check waits").
#
#   bench/forwarded-sched.sh                    # half load, 3 s traced; about a minute
#   LOAD=0.1 SECS=2 bench/forwarded-sched.sh    # another share of the saturating rate
#
# Each of the bench's phases runs one warm-up second and then at least
# SECS + 1 measured seconds, so the trace lies inside the forwarded phase.
#
# The trace stays in target/forwarded-sched/ (perf.data, the bench's own
# report in bench.txt). Needs perf (Debian: linux-perf) and root.
set -euo pipefail

LOAD=${LOAD:-0.5}
SECS=${SECS:-3}
OUT=${OUT:-target/forwarded-sched}

# shellcheck source=bench/forwarded-phase.sh
source "$(dirname "$0")/forwarded-phase.sh"
mkdir -p "$OUT"

target/release/weir-bench --spawn target/release/weir --forwarded --forwarded-load "$LOAD" \
    --warmup "$WARMUP" --secs "$PHASE" >"$OUT/bench.txt" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
# The forwarded phase is the first after this line; the trace starts
# half a second past its warm-up.
for _ in $(seq 600); do
    grep -q '^open loop at [0-9]' "$OUT/bench.txt" && break
    kill -0 $bench 2>/dev/null || { cat "$OUT/bench.txt" >&2; exit 1; }
    sleep 0.2
done
sleep "$(awk -v w="$WARMUP" 'BEGIN { print w + 0.5 }')"
# Which pid is which node (and the generator), read while they run: the
# bench's own children only, not another cluster on the same host.
names="$bench=generator"
for p in $(pgrep -P "$bench" -f 'weir serve --node-id'); do
    names+=" $p=$(tr '\0' ' ' <"/proc/$p/cmdline" | sed -n 's/.*--node-id \([^ ]*\).*/\1/p')"
done
perf sched record -o "$OUT/perf.data" -- sleep "$SECS" >/dev/null 2>&1
wait $bench
trap - EXIT
grep -E '^(open loop|forwarded|local|gateway|call)' "$OUT/bench.txt"
echo
echo "per process over the ${SECS} s traced: CPU, switch-ins, and the delay from wake-up to running (us)"
# timehist's columns: time, cpu, comm[tid/pid], wait, scheduling delay, run (ms).
perf sched timehist -i "$OUT/perf.data" 2>/dev/null |
    awk 'NR > 3 && $3 ~ /\[/ {
        id = $3; sub(/\]$/, "", id); sub(/.*\[/, "", id); pid = id; sub(/.*\//, "", pid)
        printf "%s %.0f %.3f\n", pid, $5 * 1000, $6
    }' | sort -k1,1 -k2,2n |
    awk -v names="$names" -v secs="$SECS" '
        BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); name[kv[1]] = kv[2] } }
        # Processes with fewer than 1,000 switch-ins (the kernel threads,
        # perf itself) give no percentiles worth printing.
        function flush() {
            if (count < 1000) return
            printf "%-10s %6.0f ms CPU (%3.0f%% of a core) %7d  p50 %4d  p90 %4d  p99 %4d  p999 %5d  max %5d  over 1 ms %.2f%%\n",
                label, run, run / secs / 10, count, d[int(count * 0.5) + 1], d[int(count * 0.9) + 1],
                d[int(count * 0.99) + 1], d[int(count * 0.999) + 1], d[count], over * 100 / count
        }
        $1 != pid { flush(); pid = $1; count = 0; run = 0; over = 0
                    label = (pid in name) ? name[pid] : "pid " pid }
        { d[++count] = $2; run += $3; if ($2 > 1000) over++ }
        END { flush() }'
