#!/usr/bin/env bash
# A data set 10x the server's memory limit (docs/server.md): both servers
# get 64 MiB (Redis: maxmemory with noeviction; tphdb-server: --memory-mb),
# then pipelined SETs (`-P 16`, 50 clients) of VALUE_SIZE-byte values over
# enough random keys for about 0.66 GB of distinct data (6.3e5 keys at
# 1000 bytes, 4.7e6 at 100), three SETs a key, then GETs over the same keys:
# at once, and again once the background work has settled.
# Prints what each server holds, tphdb-server's memory (anonymous, and file
# pages mapped from its pieces, which are page cache) and redis-benchmark's
# CSV rows; Redis is measured on the keys it can hold under the limit.
#
#   scripts/server-bench-big.sh [VALUE_SIZE]   (default 1000; needs
#   redis-server and redis-benchmark)
#
# TPHDB_SERVER_ARGS adds flags to tphdb-server's command line (e.g.
# --compaction-priority normal); SKIP_REDIS=1 measures tphdb-server alone,
# to compare its builds or flags run after run.
set -u
repo="$(cd "$(dirname "$0")/.." && pwd)"
value=${1:-1000}
# Distinct data of about 0.66 GB: a key (`key:` and 12 digits) and its
# value, plus 24 bytes of a stored entry's own overhead.
keys=$((660000000 / (value + 40)))
sets=$((keys * 3))
# Keys Redis holds well within 64 MiB: about 70% of what fits at some
# 90 bytes of its own per key (it held 57,748 at 1000 bytes).
small=$((45000000 / (value + 90)))
cargo build --release -q -p tphdb-server --manifest-path "$repo/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "values of $value bytes, $keys keys, $sets SETs"
if [ "${SKIP_REDIS:-0}" != 1 ]; then
  redis-server --port 7479 --dir "$work" --appendonly yes --appendfsync everysec --save "" \
     --maxmemory 64mb --maxmemory-policy noeviction --daemonize no > redis.log 2>&1 &
  sleep 1
  redis-benchmark -p 7479 -t set -n "$sets" -r "$keys" -d "$value" -c 50 -P 16 -q 2>&1 | tail -2
  echo "redis keys: $(redis-cli -p 7479 dbsize)  used_memory: $(redis-cli -p 7479 info memory | grep '^used_memory:' | tr -d '\r')"
  redis-cli -p 7479 shutdown nosave >/dev/null 2>&1
  sleep 1
  mkdir "$work/redis-small"
  redis-server --port 7481 --dir "$work/redis-small" --appendonly yes --appendfsync everysec --save "" \
     --maxmemory 64mb --maxmemory-policy noeviction --daemonize no > redis-small.log 2>&1 &
  sleep 1
  echo "redis, $small keys:"
  redis-benchmark -p 7481 -t set -n $((small * 10)) -r "$small" -d "$value" -c 50 -P 16 --csv 2>&1 | tail -1
  echo "redis keys: $(redis-cli -p 7481 dbsize)"
  redis-benchmark -p 7481 -t get -n 2000000 -r "$small" -d "$value" -c 50 -P 16 --csv 2>&1 | tail -1
  redis-benchmark -p 7481 -t get -n 200000 -r "$small" -d "$value" -c 50 --csv 2>&1 | tail -1
  redis-cli -p 7481 shutdown nosave >/dev/null 2>&1
  sleep 1
fi
echo "tphdb-server, $keys keys:"
"$repo/target/release/tphdb-server" --dir "$work/tphdb" --port 7480 --appendfsync everysec --memory-mb 64 \
   ${TPHDB_SERVER_ARGS:-} > tphdb.log 2>&1 &
pid=$!
sleep 1
redis-benchmark -p 7480 -t set -n "$sets" -r "$keys" -d "$value" -c 50 -P 16 --csv 2>&1 | tail -1
echo "tphdb keys: $(redis-cli -p 7480 dbsize)  VmHWM/VmRSS: $(grep -E 'VmHWM|RssAnon|RssFile' /proc/$pid/status | tr -s ' ' | tr '\n' ' ')"
echo "tphdb after the SETs: $(redis-cli -p 7480 info tphdb | tr -d '\r' | grep -E '^(write_amplification|wal_amplification|flushes|compactions|stall_micros|bytes_written_by_cause|compaction_bytes_read_by_cause|level[0-9]+):' | tr '\n' ' ')"
echo "GETs while the load's flushes and merges still run:"
redis-benchmark -p 7480 -t get -n 2000000 -r "$keys" -d "$value" -c 50 -P 16 --csv 2>&1 | tail -1
# Then as a read benchmark after a load is usually run (db_bench's
# readrandom on an existing database): once no flush or compaction runs
# or is due.
busy() { redis-cli -p 7480 info tphdb | tr -d '\r' | grep -qE '^(running_jobs:[1-9]|compaction_pending:1)'; }
waited=0
while busy && [ "$waited" -lt 600 ]; do sleep 1; waited=$((waited + 1)); done
echo "GETs after the background work settled (${waited} s later):"
redis-benchmark -p 7480 -t get -n 2000000 -r "$keys" -d "$value" -c 50 -P 16 --csv 2>&1 | tail -1
redis-benchmark -p 7480 -t get -n 200000 -r "$keys" -d "$value" -c 50 --csv 2>&1 | tail -1
echo "after gets VmHWM/VmRSS: $(grep -E 'VmHWM|RssAnon|RssFile' /proc/$pid/status | tr -s ' ' | tr '\n' ' ')"
echo "tphdb after the GETs: $(redis-cli -p 7480 info tphdb | tr -d '\r' | grep -E '^(reads_per_get|index_bytes_per_key|level[0-9]+):' | tr '\n' ' ')"
du -sh "$work/tphdb"
kill -TERM $pid; wait $pid
