#!/usr/bin/env bash
# A data set 10x the server's memory limit (docs/server.md): both servers
# get 64 MiB (Redis: maxmemory with noeviction; tphdb-server: --memory-mb),
# then 2e6 pipelined SETs of 1000-byte values over 7e5 random keys (about
# 0.66 GB of distinct data), then GETs over the same keys. Prints what each
# server holds, tphdb-server's memory (anonymous, and file pages mapped
# from its pieces, which are page cache) and redis-benchmark's CSV rows.
#
#   scripts/server-bench-big.sh      (needs redis-server, redis-benchmark)
set -u
repo="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release -q -p tphdb-server --manifest-path "$repo/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
redis-server --port 7479 --dir "$work" --appendonly yes --appendfsync everysec --save "" \
   --maxmemory 64mb --maxmemory-policy noeviction --daemonize no > redis.log 2>&1 &
sleep 1
redis-benchmark -p 7479 -t set -n 2000000 -r 700000 -d 1000 -c 50 -P 16 -q 2>&1 | tail -2
echo "redis keys: $(redis-cli -p 7479 dbsize)  used_memory: $(redis-cli -p 7479 info memory | grep '^used_memory:' | tr -d '\r')"
redis-cli -p 7479 shutdown nosave >/dev/null 2>&1
sleep 1
# Redis's own rates on what it can hold under the limit: 5e4 keys.
mkdir "$work/redis-small"
redis-server --port 7481 --dir "$work/redis-small" --appendonly yes --appendfsync everysec --save "" \
   --maxmemory 64mb --maxmemory-policy noeviction --daemonize no > redis-small.log 2>&1 &
sleep 1
echo "redis, 5e4 keys:"
redis-benchmark -p 7481 -t set -n 500000 -r 50000 -d 1000 -c 50 -P 16 --csv 2>&1 | tail -1
redis-benchmark -p 7481 -t get -n 2000000 -r 50000 -d 1000 -c 50 -P 16 --csv 2>&1 | tail -1
redis-benchmark -p 7481 -t get -n 200000 -r 50000 -d 1000 -c 50 --csv 2>&1 | tail -1
redis-cli -p 7481 shutdown nosave >/dev/null 2>&1
sleep 1
echo "tphdb-server, 7e5 keys:"
"$repo/target/release/tphdb-server" --dir "$work/tphdb" --port 7480 --appendfsync everysec --memory-mb 64 > tphdb.log 2>&1 &
pid=$!
sleep 1
redis-benchmark -p 7480 -t set -n 2000000 -r 700000 -d 1000 -c 50 -P 16 --csv 2>&1 | tail -1
echo "tphdb keys: $(redis-cli -p 7480 dbsize)  VmHWM/VmRSS: $(grep -E 'VmHWM|RssAnon|RssFile' /proc/$pid/status | tr -s ' ' | tr '\n' ' ')"
redis-benchmark -p 7480 -t get -n 2000000 -r 700000 -d 1000 -c 50 -P 16 --csv 2>&1 | tail -1
redis-benchmark -p 7480 -t get -n 200000 -r 700000 -d 1000 -c 50 --csv 2>&1 | tail -1
echo "after gets VmHWM/VmRSS: $(grep -E 'VmHWM|RssAnon|RssFile' /proc/$pid/status | tr -s ' ' | tr '\n' ' ')"
du -sh "$work/tphdb"
kill -TERM $pid; wait $pid
