#!/bin/sh
# The sidecar setup on one machine: `weir serve` on loopback beside the
# example service, which asks it over gRPC. Ctrl-C stops both.
#
#   examples/sidecar/run.sh            # release build
#   PROFILE=dev examples/sidecar/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
profile=${PROFILE:-release}
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
weir_http=${WEIR_HTTP:-127.0.0.1:8080}
weir_grpc=${WEIR_GRPC:-127.0.0.1:8081}
weir_gossip=${WEIR_GOSSIP:-127.0.0.1:7946}
app_listen=${APP_LISTEN:-127.0.0.1:3000}

cargo build --quiet --profile "$profile" --manifest-path "$root/Cargo.toml" \
    -p weir-node --bin weir -p weir-examples --bin axum_service
bin=${CARGO_TARGET_DIR:-$root/target}/$dir

"$bin/weir" serve --http "$weir_http" --grpc "$weir_grpc" --gossip "$weir_gossip" \
    --rules "$here/rules.toml" &
weir_pid=$!
app_pid=
trap 'kill $weir_pid $app_pid 2>/dev/null || true' EXIT INT TERM

# Ready when /readyz says so; give up after 10 s rather than hang.
tries=0
until curl -fsS "http://$weir_http/readyz" >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ] || ! kill -0 "$weir_pid" 2>/dev/null; then
        echo "run.sh: weir did not become ready on $weir_http" >&2
        exit 1
    fi
    sleep 0.1
done

"$bin/axum_service" --listen "$app_listen" --weir "http://$weir_grpc" --fail open &
app_pid=$!
wait "$app_pid"
