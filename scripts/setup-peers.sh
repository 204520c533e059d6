#!/usr/bin/env bash
# Installs what the `peers` benchmark feature links against: RocksDB 7.8 and
# LevelDB from Debian's packages, and libclang for the RocksDB bindings;
# Redis (server, redis-cli, redis-benchmark) and its Python client, which
# tphdb-server is tested with and measured against, and twemproxy
# (nutcracker), which shards keys over several of them; valgrind and a C
# compiler, which run the C API's test program.
# LMDB, redb and fjall build from their crates; Pogreb's Go driver is built
# into target/. Needs root (or sudo) for the packages.
set -euo pipefail

packages=(librocksdb-dev libleveldb-dev libclang-dev fio redis-server redis-tools nutcracker valgrind gcc)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# The server's tests speak to it with the Python client Redis users pick.
python3 -c "import redis" 2>/dev/null || python3 -m pip install --quiet "redis>=5"
# Pogreb runs through a small Go driver (pinned in its go.mod).
repo="$(cd "$(dirname "$0")/.." && pwd)"
(cd "$repo/tools/pogreb-driver" && go build -o "$repo/target/pogreb-driver" .)

echo "peers ready: cargo build --release -p tphdb-cli --features peers && target/release/tphdb bench ycsb-c --engines tphdb,rocksdb"
