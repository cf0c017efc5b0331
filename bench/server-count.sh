#!/usr/bin/env bash
# Instructions per request of a whole server process over loopback,
# exactly: `weir serve` and `weir-bare` each run under callgrind, and
# h2load sends every edge's request file N and then 2N times; the
# difference between the two counts, over N, is what one request costs the
# server: the transport (tokio, hyper/h2, tonic), the handler, the
# allocator, and the user-space side of its system calls (docs/
# performance.md, "Every edge in instructions").
#
# Wall-time ratios on this shared host move by a tenth between runs and
# by more under steal; a count moves by about 0.1% (the background ticks
# of the node during the run), so two builds, or the node and its bare
# reference, compare exactly. It does not see what a count cannot: cache
# misses, lock waits, and the kernel's share of each system call.
#
#   bench/server-count.sh                   # every edge, under 10 minutes after the build
#   ONLY='RLS' bench/server-count.sh        # the edges whose name matches (grep -E)
#   WEIR=old/weir bench/server-count.sh     # another build of the node
#   bench/pgo.sh bench/server-count.sh      # both built profile-guided
#   VALGRIND_OPTS='--cache-sim=yes --branch-sim=yes' ONLY='RLS, allowed' N=1000 WARM=500 bench/server-count.sh
#                                           # also simulated cache misses and mispredictions (about
#                                           # twice as slow; callgrind_annotate prints them per dump)
#
# Needs valgrind and h2load (Debian: valgrind, nghttp2-client); installs
# them with apt-get when missing and run as root. Sends only to 127.0.0.1.
set -euo pipefail

N=${N:-2000}
WARM=${WARM:-1000}
ONLY=${ONLY:-}
PORT=${PORT:-19300}
OUT=${OUT:-target/server-count}
PROFILE=${PROFILE:-release} # the cargo profile both are built with (bench/pgo.sh sets it)

cd "$(dirname "$0")/.."
REQ=bench/requests

need() {
    local tool=$1 package=$2
    command -v "$tool" >/dev/null && return
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q "$package" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y -q "$package" >/dev/null; }
    fi
    command -v "$tool" >/dev/null || { echo "server-count.sh: $tool is missing (Debian package $package)" >&2; exit 2; }
}
need valgrind valgrind
need h2load nghttp2-client

cargo build --profile "$PROFILE" -q -p weir-node --bin weir -p weir-sim --bin weir-bare
TARGET=${CARGO_TARGET_DIR:-target}/$PROFILE
WEIR=${WEIR:-$TARGET/weir}
rm -rf "$OUT" && mkdir -p "$OUT"

# The JSON bodies wrk sends (bench/wrk/check.lua), with one key.
printf '{"key":"k1","route":"POST /bench","cost":1}' >"$OUT/http-allow.json"
printf '{"key":"k1","route":"bench-deny","cost":1}' >"$OUT/http-deny.json"

RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
CHECK=/weir.v1.RateLimiter/Check
# name | request file | path | port (grpc, http, or counting: the bare
# counting reference's, the node's gRPC) | connections x streams
edges=(
    "RLS, allowed|$REQ/rls-allow.bin|$RLS|grpc|8 8"
    "RLS, denied|$REQ/rls-deny.bin|$RLS|grpc|8 8"
    "gRPC Check 1 item, allowed|$REQ/check1-allow.bin|$CHECK|grpc|8 8"
    "gRPC Check 1 item, denied|$REQ/check1-deny.bin|$CHECK|grpc|8 8"
    "gRPC Check 100 items|$REQ/check100-allow.bin|$CHECK|grpc|8 2"
    "gRPC Check 100 items vs counting|$REQ/check100-allow.bin|$CHECK|counting|8 2"
    "HTTP, allowed|$OUT/http-allow.json|/v1/check|http|64 1"
    "HTTP, denied|$OUT/http-deny.json|/v1/check|http|64 1"
)

# Every request must be answered (a denied HTTP check is a 429, which
# h2load counts as failed, so "done" is what is checked).
load() { # count file path proto url-base conns streams
    local headers=(-H 'content-type: application/grpc' -H 'te: trailers') h1=()
    if [ "$4" = http ]; then
        headers=(-H 'content-type: application/json')
        h1=(--h1)
    fi
    h2load "${h1[@]}" -c "$6" -m "$7" -t 1 -n "$1" "${headers[@]}" -d "$2" "http://$5$3" 2>&1 |
        awk '/^requests:/ { seen = 1 }
             /^requests:/ && ($2 != $6 || $0 !~ / 0 errored, 0 timeout/) { print "h2load: not every request answered: " $0 > "/dev/stderr"; bad = 1 }
             END { exit bad || !seen }'
}

total() { # the instruction count in one callgrind dump
    callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

dumps=0
last=
dump() { # pid name: dumps the counts since the last dump (or zeroing) to $last
    callgrind_control -d "$1" >/dev/null 2>&1
    dumps=$((dumps + 1))
    last="$OUT/$2.$1.$dumps"
    for _ in $(seq 600); do
        [ -s "$last" ] && return
        sleep 0.1
    done
    echo "server-count.sh: no dump $last" >&2
    exit 1
}

# server name, its HTTP, gRPC and counting gRPC addresses, the command
# that runs it
count_server() {
    local name=$1 http=$2 grpc=$3 counting=$4
    shift 4
    RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.%p" "$@" \
        >"$OUT/$name.log" 2>&1 &
    local pid=$!
    trap "kill $pid 2>/dev/null || true" EXIT
    dumps=0
    # Under callgrind a server takes seconds to start.
    for _ in $(seq 600); do
        curl -s -o /dev/null -X POST -d '{}' "http://$http/v1/check" && break
        kill -0 "$pid" 2>/dev/null || { echo "server-count.sh: $name did not start; see $OUT/$name.log" >&2; exit 1; }
        sleep 0.2
    done
    # A port taken by something else would be counted in this one's place.
    kill -0 "$pid" 2>/dev/null || { echo "server-count.sh: $name exited; see $OUT/$name.log" >&2; exit 1; }
    for e in "${edges[@]}"; do
        IFS='|' read -r edge file path port cs <<<"$e"
        [ -n "$ONLY" ] && ! grep -qE "$ONLY" <<<"$edge" && continue
        local url=$grpc proto=grpc
        case $port in
        http) url=$http proto=http ;;
        counting) url=$counting ;;
        esac
        # Keys created and connections warm before anything is counted.
        load "$WARM" "$file" "$path" "$proto" "$url" $cs
        callgrind_control -z "$pid" >/dev/null 2>&1
        load "$N" "$file" "$path" "$proto" "$url" $cs
        dump "$pid" "$name"
        local once=$last
        load $((2 * N)) "$file" "$path" "$proto" "$url" $cs
        dump "$pid" "$name"
        printf '%s|%s|%d\n' "$edge" "$name" $((($(total "$last") - $(total "$once")) / N)) >>"$OUT/counts"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    trap - EXIT
}

count_server node "127.0.0.1:$PORT" "127.0.0.1:$((PORT + 1))" "127.0.0.1:$((PORT + 1))" \
    "$WEIR" serve --http "127.0.0.1:$PORT" --grpc "127.0.0.1:$((PORT + 1))" \
    --gossip "127.0.0.1:$((PORT + 2))" --rules "$REQ/rules.toml" --ui false
count_server bare "127.0.0.1:$((PORT + 10))" "127.0.0.1:$((PORT + 11))" "127.0.0.1:$((PORT + 13))" \
    "$TARGET/weir-bare" --http "127.0.0.1:$((PORT + 10))" --grpc "127.0.0.1:$((PORT + 11))" \
    --grpc-counting "127.0.0.1:$((PORT + 13))" \
    --max-secs 3600

printf '%-28s %12s %12s %8s\n' edge 'node Ir/req' 'bare Ir/req' ratio
awk -F'|' '{ if ($2 == "node") node[$1] = $3; else bare[$1] = $3; order[NR] = $1 }
    END { for (i = 1; i <= NR; i++) { e = order[i]; if (seen[e]++) continue
          printf "%-28s %12d %12d %8.3f\n", e, node[e], bare[e], bare[e] / node[e] } }' "$OUT/counts"
