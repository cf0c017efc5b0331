#!/bin/sh
# The sidecar setup on one machine: `weir serve` on loopback beside the
# example service, which asks it over gRPC. Ctrl-C stops both.
#
#   examples/sidecar/run.sh            # release build
#   PROFILE=dev examples/sidecar/run.sh
#   examples/sidecar/run.sh --check    # start both on free ports, send
#       requests through the service until the per-client limit denies,
#       check every answer carries the rate-limit headers, stop both; exit
#       0 when all held (what CI runs, through examples/tests/sidecar.rs)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: run.sh [--check]" >&2; exit 2 ;;
esac
command -v curl >/dev/null 2>&1 || { echo "run.sh: needs curl on PATH" >&2; exit 1; }
profile=${PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
# A check picks free ports (0) so it never collides with anything running.
if $check; then free=0; else free=; fi
weir_http=${WEIR_HTTP:-127.0.0.1:${free:-8080}}
weir_grpc=${WEIR_GRPC:-127.0.0.1:${free:-8081}}
weir_gossip=${WEIR_GOSSIP:-127.0.0.1:${free:-7946}}
app_listen=${APP_LISTEN:-127.0.0.1:${free:-3000}}

"${CARGO:-cargo}" build --quiet --profile "$profile" --manifest-path "$root/Cargo.toml" \
    -p weir-node --bin weir -p weir-examples --bin axum_service
bin=${CARGO_TARGET_DIR:-$root/target}/$dir

logs=$(mktemp -d)
weir_pid=
app_pid=
stop() {
    for pid in $app_pid $weir_pid; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$logs"
}
trap stop EXIT
# dash runs no EXIT trap for a signal it dies of: turn each into an exit.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 141' PIPE
trap 'exit 143' TERM

fail() {
    echo "run.sh: $*" >&2
    for log in "$logs"/*.log; do
        [ -f "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
    done
    exit 1
}

# Polls until `$1` (a shell test) holds, every 0.1 s for at most 30 s
# (a debug build starts slowly), or fails naming `$2`; gives up at once
# when the process `$3` has died.
await() {
    tries=0
    until eval "$1"; do
        tries=$((tries + 1))
        [ "$tries" -le 300 ] || fail "$2: not within 30 s"
        kill -0 "$3" 2>/dev/null || fail "$2: the process exited"
        sleep 0.1
    done
}

if $check; then
    # Port 0 becomes a real port: the node logs the addresses it bound.
    "$bin/weir" serve --http "$weir_http" --grpc "$weir_grpc" --gossip "$weir_gossip" \
        --rules "$here/rules.toml" --log-format json 2>"$logs/weir.log" &
    weir_pid=$!
    await 'grep -q "weir node serving" "$logs/weir.log"' "weir did not start" "$weir_pid"
    serving=$(grep "weir node serving" "$logs/weir.log" | head -n 1)
    weir_http=$(printf '%s' "$serving" | sed -n 's/.*"http":"\([^"]*\)".*/\1/p')
    weir_grpc=$(printf '%s' "$serving" | sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p')
else
    "$bin/weir" serve --http "$weir_http" --grpc "$weir_grpc" --gossip "$weir_gossip" \
        --rules "$here/rules.toml" &
    weir_pid=$!
fi
await 'curl -fsS "http://$weir_http/readyz" >/dev/null 2>&1' "weir not ready on $weir_http" "$weir_pid"

if ! $check; then
    "$bin/axum_service" --listen "$app_listen" --weir "http://$weir_grpc" --fail open &
    app_pid=$!
    wait "$app_pid"
    exit 0
fi

# Failing closed, a sidecar that cannot answer shows as a 503, not a 200.
"$bin/axum_service" --listen "$app_listen" --weir "http://$weir_grpc" --fail closed \
    2>"$logs/app.log" &
app_pid=$!
await 'grep -q "listening on http://" "$logs/app.log"' "the service did not start" "$app_pid"
app=$(sed -n 's|.*listening on http://\([^ ]*\).*|\1|p' "$logs/app.log" | head -n 1)

# The per-client limit of rules.toml is 10 a minute: ten 200s, then a 429.
headers="ratelimit-limit ratelimit-remaining ratelimit-reset x-ratelimit-limit
x-ratelimit-remaining x-ratelimit-reset ratelimit-policy ratelimit"
admitted=0
status=
n=0
while [ "$n" -lt 20 ]; do
    n=$((n + 1))
    status=$(curl -sS -o "$logs/body" -D "$logs/headers" -w '%{http_code}' \
        --max-time 5 -H 'Authorization: Bearer token-alice' "http://$app/") ||
        fail "request $n to the service failed"
    for h in $headers; do
        grep -qi "^$h:" "$logs/headers" || fail "response $n ($status) lacks $h"
    done
    case "$status" in
        200) admitted=$((admitted + 1)) ;;
        429)
            grep -qi '^retry-after:' "$logs/headers" || fail "the 429 lacks Retry-After"
            break
            ;;
        *) fail "response $n: status $status" ;;
    esac
done
[ "$status" = 429 ] || fail "no 429 after $n requests"
[ "$admitted" -eq 10 ] || fail "$admitted requests admitted before the 429, not the limit of 10"
echo "run.sh --check: $admitted x 200 then 429 through the service, every answer with the rate-limit headers"
