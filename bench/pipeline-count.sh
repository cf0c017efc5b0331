#!/usr/bin/env bash
# Instructions per 100-item weir.v1 Check in process, exactly, for the
# node's handler and the two bare references' (docs/performance.md, "The
# 100-item call without its transport").
#
# Runs examples/pipeline_count.rs under callgrind twice per handler, with
# LOW and HIGH calls inside the counted function, and prints the difference
# per call and per item: start-up, key creation and the profiler's own
# overhead cancel out, so two builds compare to the instruction where the
# wall-time bench on this host moves by 10% between runs.
#
#   bench/pipeline-count.sh                        # node, counting, plain; ~1 minute after the build
#   HANDLERS=node bench/pipeline-count.sh          # the node alone
#   BIN=/tmp/old/pipeline_count bench/pipeline-count.sh   # another build of the example
#   CALL=rls HANDLERS='node plain' bench/pipeline-count.sh # Envoy's ShouldRateLimit instead
#                                                          # (rls-denied: the denied case;
#                                                          # one, one-denied: the 1-item Check;
#                                                          # http, http-denied: POST /v1/check)
#
# The counts stay in target/pipeline-count/<handler>.<call>.<calls>.out:
#   callgrind_annotate --inclusive=yes target/pipeline-count/node.batch.400.out
# Needs valgrind; installs it with apt-get when missing and run as root.
set -euo pipefail

CALL=${CALL:-batch}
HANDLERS=${HANDLERS:-node counting plain}
[ "$CALL" = batch ] && ITEMS=100 || ITEMS=1
LOW=${LOW:-200}
HIGH=${HIGH:-400}
OUT=${OUT:-target/pipeline-count}
BIN=${BIN:-}

cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q valgrind >/dev/null
    else
        echo "needs valgrind (Debian: apt-get install valgrind)" >&2
        exit 1
    fi
fi
if [ -z "$BIN" ]; then
    cargo build --release -q -p weir-sim --example pipeline_count
    BIN=target/release/examples/pipeline_count
fi
mkdir -p "$OUT"

total() { # the program's instruction count in one callgrind output
    callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

printf '%-10s %14s %12s\n' handler 'Ir per call' 'Ir per item'
for h in $HANDLERS; do
    for n in "$LOW" "$HIGH"; do
        valgrind --tool=callgrind --toggle-collect='pipeline_count::measured*' \
            --callgrind-out-file="$OUT/$h.$CALL.$n.out" "$BIN" "$n" "$h" "$CALL" >/dev/null 2>&1
    done
    per_call=$((($(total "$OUT/$h.$CALL.$HIGH.out") - $(total "$OUT/$h.$CALL.$LOW.out")) / (HIGH - LOW)))
    printf '%-10s %14d %12d\n' "$h" "$per_call" $((per_call / ITEMS))
done
