#!/usr/bin/env bash
# What mutual TLS between peers costs the forwarded path: `weir-bench
# --forwarded` on a plain peer port and on one under --peer-tls-cert,
# alternated ROUNDS times (default 5), then the median of each figure
# (docs/performance.md, "Peers over mutual TLS"). Both layouts give the
# peers a port of their own (--peer-grpc), so TLS is the one difference.
#
#   bench/forwarded-tls.sh              # 5 rounds each, about 8 minutes
#   ROUNDS=1 bench/forwarded-tls.sh     # a quick look
#
# Each run's report stays in target/forwarded-tls/. Needs openssl.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
OUT=${OUT:-target/forwarded-tls}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: a whole number above 0, got '$ROUNDS'" >&2; exit 1; }
command -v openssl >/dev/null || { echo "needs openssl" >&2; exit 1; }

cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -q -p weir-node --bin weir -p weir-sim --bin weir-bench
mkdir -p "$OUT"

# One peer CA and one certificate every node shows (names are not checked).
pki=$(mktemp -d)
trap 'rm -rf "$pki"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj /CN=weir-bench-peer-ca \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$pki/peer.key" -out "$pki/peer.csr" -subj /CN=weir-peer 2>/dev/null
printf '%s\n' "basicConstraints=critical,CA:FALSE" "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=DNS:weir-peer" >"$pki/ext"
openssl x509 -req -in "$pki/peer.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/ext" -out "$pki/peer.crt" 2>/dev/null

plain=(--node-arg=--peer-grpc=127.0.0.1:0)
tls=("${plain[@]}" --node-arg=--peer-tls-cert="$pki/peer.crt"
    --node-arg=--peer-tls-key="$pki/peer.key" --node-arg=--peer-ca="$pki/ca.crt")
for r in $(seq "$ROUNDS"); do
    for layout in plain tls; do
        declare -n args=$layout
        echo "round $r: $layout" >&2
        target/release/weir-bench --spawn target/release/weir --forwarded "${args[@]}" \
            >"$OUT/$layout-$r.txt" 2>&1
    done
done

# Per run: saturating forwarded rate (one copy, two copies), forwarded p50
# and p99 from sent at half load, CPU per forwarded check at half load.
figures() {
    awk '
        /^closed loop, 64 callers, forwarded, one copy:/ { one = $8 }
        /^closed loop, 64 callers, forwarded, two copies:/ { two = $8 }
        /^forwarded \(keys on nodes 2 and 3\):/ {
            for (i = 1; i <= NF; i++) { if ($i == "p50") p50 = $(i + 1); if ($i == "p99") { p99 = $(i + 1); break } }
        }
        /^  forwarded, half load/ { gw = $4; own = $6 }
        END { gsub(",", "", one); gsub(",", "", two); print one, two, p50, p99, gw, own }
    ' "$1"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "medians of $ROUNDS alternating rounds"
printf '%-6s %22s %22s %10s %10s %18s\n' layout "sat. one copy (chk/s)" "sat. two copies" "p50 (us)" "p99 (us)" "CPU node1/2+3 (us)"
for layout in plain tls; do
    rows=$(for f in "$OUT/$layout"-*.txt; do figures "$f"; done)
    col() { echo "$rows" | awk -v c="$1" '{ print $c }' | median; }
    printf '%-6s %22s %22s %10s %10s %18s\n' "$layout" "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5) / $(col 6)"
done
