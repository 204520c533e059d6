"""tphdb against the stores Python users pick (rocksdict, lmdb), side by side
in one run: random puts, random gets of present keys, and a full scan.

    pip install ./python rocksdict lmdb
    python3 python/bench.py --keys 1000000 --value-size 100 --json bench.json

Each store runs in a fresh temporary directory under --dir, with its
documented defaults for a write-heavy embedded use: rocksdict's Options()
with no sync, lmdb with map_size sized to the data, writemap and no sync
(as tphdb's default syncs only on request). Prints a table with ratios to
tphdb and writes JSON with --json.
"""

import argparse
import json
import os
import random
import shutil
import tempfile
import time


def keys_and_values(n, value_size, seed):
    rng = random.Random(seed)
    keys = [b"%016d" % rng.randrange(10**15) for _ in range(n)]
    value = os.urandom(value_size)
    return keys, value


class Tphdb:
    name = "tphdb"

    def __init__(self, path, n, value_size):
        import tphdb

        self.db = tphdb.DB(path)

    def put_all(self, keys, value):
        db = self.db
        for k in keys:
            db.put(k, value)
        db.flush()

    def get_all(self, keys):
        get = self.db.get
        return sum(1 for k in keys if get(k) is not None)

    def scan(self):
        return sum(1 for _ in self.db.iterate())

    def close(self):
        self.db.close()


class Rocksdict:
    name = "rocksdict"

    def __init__(self, path, n, value_size):
        import rocksdict

        self.db = rocksdict.Rdict(path, rocksdict.Options(raw_mode=True))

    def put_all(self, keys, value):
        db = self.db
        for k in keys:
            db.put(k, value)
        self.db.flush()

    def get_all(self, keys):
        get = self.db.get
        return sum(1 for k in keys if get(k) is not None)

    def scan(self):
        return sum(1 for _ in self.db.items())

    def close(self):
        self.db.close()


class Lmdb:
    name = "lmdb"

    def __init__(self, path, n, value_size):
        import lmdb

        size = max(1 << 30, 4 * n * (value_size + 64))
        self.env = lmdb.open(path, map_size=size, writemap=True, sync=False, metasync=False)

    def put_all(self, keys, value):
        # One transaction per put, as the other stores commit each put.
        for k in keys:
            with self.env.begin(write=True) as txn:
                txn.put(k, value)
        self.env.sync()

    def get_all(self, keys):
        with self.env.begin() as txn:
            return sum(1 for k in keys if txn.get(k) is not None)

    def scan(self):
        with self.env.begin() as txn:
            return sum(1 for _ in txn.cursor())

    def close(self):
        self.env.close()


def run(store_type, keys, value, parent):
    path = tempfile.mkdtemp(prefix=store_type.name + "-", dir=parent)
    try:
        store = store_type(path, len(keys), len(value))
        t = time.perf_counter()
        store.put_all(keys, value)
        put_s = time.perf_counter() - t
        lookups = random.Random(1).sample(keys, len(keys))
        t = time.perf_counter()
        found = store.get_all(lookups)
        get_s = time.perf_counter() - t
        t = time.perf_counter()
        scanned = store.scan()
        scan_s = time.perf_counter() - t
        store.close()
        distinct = len(set(keys))
        assert found == len(keys) and scanned == distinct, (store_type.name, found, scanned)
        n = len(keys)
        return {"engine": store_type.name, "put_ops": n / put_s, "get_ops": n / get_s, "scan_keys": scanned / scan_s}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--dir", default=".")
    p.add_argument("--json")
    a = p.parse_args()
    keys, value = keys_and_values(a.keys, a.value_size, 42)
    stores = [Tphdb]
    for name, cls in (("rocksdict", Rocksdict), ("lmdb", Lmdb)):
        try:
            __import__(name)
            stores.append(cls)
        except ImportError:
            print(f"{name} is not installed: skipped")
    results = []
    for s in stores:
        print(f"running {s.name} ...", flush=True)
        results.append(run(s, keys, value, a.dir))
    base = results[0]
    print(f"\n{a.keys} keys of 16 bytes, {a.value_size}-byte values, one thread")
    print(f"{'engine':<10} {'put/s':>10} {'get/s':>10} {'scan keys/s':>12}   ratios to tphdb (put, get, scan)")
    for r in results:
        print(
            f"{r['engine']:<10} {r['put_ops']:>10.0f} {r['get_ops']:>10.0f} {r['scan_keys']:>12.0f}"
            f"   {r['put_ops'] / base['put_ops']:.2f}x {r['get_ops'] / base['get_ops']:.2f}x"
            f" {r['scan_keys'] / base['scan_keys']:.2f}x"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"keys": a.keys, "value_size": a.value_size, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
