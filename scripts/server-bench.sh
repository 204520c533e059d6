#!/usr/bin/env bash
# Measures tphdb-server against redis-server with redis-benchmark, side by
# side in one run: SET and GET, with and without pipelining. Both persist
# about alike: Redis with appendonly + appendfsync everysec (no RDB
# snapshots), tphdb-server with --appendfsync everysec.
#
#   scripts/server-bench.sh [REQUESTS] [CLIENTS] [PIPELINE]
#
# Prints a CSV table (one row per server, workload and pipelining) and
# writes it to target/server-bench.csv. Needs redis-server and
# redis-benchmark (scripts/setup-peers.sh installs them).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
requests=${1:-1000000}
clients=${2:-50}
pipeline=${3:-16}
cargo build --release -q -p tphdb-server --manifest-path "$repo/Cargo.toml"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
out="$repo/target/server-bench.csv"
echo "server,pipeline,test,rps,avg_ms,min_ms,p50_ms,p95_ms,p99_ms,max_ms" | tee "$out"

wait_port() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "no server on port $1" >&2
    exit 1
}

run() { # name port
    for p in "$pipeline" 1; do
        n=$requests
        # Unpipelined requests are one round trip each: a tenth suffices.
        [[ $p == 1 ]] && n=$((requests / 10))
        redis-benchmark -p "$2" -t set,get -n "$n" -c "$clients" -P "$p" -r 1000000 -d 100 --csv |
            tail -n +2 | tr -d '"' | sed "s/^/$1,$p,/" | tee -a "$out"
    done
}

redis-server --port 7379 --dir "$work" --appendonly yes --appendfsync everysec \
    --save "" --daemonize no >"$work/redis.log" 2>&1 &
wait_port 7379
run redis 7379
redis-cli -p 7379 shutdown nosave >/dev/null 2>&1 || true

"$repo/target/release/tphdb-server" --dir "$work/tphdb" --port 7380 \
    --appendfsync everysec >"$work/tphdb.log" 2>&1 &
wait_port 7380
run tphdb 7380
kill -TERM %2 2>/dev/null || true
