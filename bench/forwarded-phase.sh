# Sourced by the forwarded-path scripts (forwarded-sched.sh,
# forwarded-syscalls.sh): checks SECS and LOAD, sets WARMUP and PHASE (each
# phase of `weir-bench --forwarded` lasts at least SECS + 1 measured
# seconds, so a trace of SECS fits inside one), moves to the repository
# root, and builds the node and the bench after checking for perf.
number='^[0-9]+([.][0-9]+)?$'
[[ $SECS =~ $number ]] && awk -v s="$SECS" 'BEGIN { exit !(s > 0) }' ||
    { echo "SECS: a number of seconds above 0, got '$SECS'" >&2; exit 1; }
[[ $LOAD =~ $number ]] || { echo "LOAD: a share of the saturating rate, got '$LOAD'" >&2; exit 1; }
WARMUP=1
PHASE=$(awk -v s="$SECS" 'BEGIN { print (s + 1 > 5) ? s + 1 : 5 }')

cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v perf >/dev/null || { echo "needs perf (Debian: apt-get install linux-perf)" >&2; exit 1; }
cargo build --release -q -p weir-node --bin weir -p weir-sim --bin weir-bench
