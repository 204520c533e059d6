#!/usr/bin/env python3
"""Prints the settings of a `tphdb bench` run (its JSON file) as the one
sentence results.md gives each run. Used by scripts/benchmarks.sh."""

import json
import sys


def main(path):
    p = json.load(open(path))["params"]
    budget = f"a {p['memory_mb']} MiB memory budget per engine, " if p.get("memory_mb") else "no memory budget, "
    reads = "O_DIRECT reads for tphdb and RocksDB." if p["direct_io"] else "buffered reads."
    print(
        f"{p['keys']} keys of {p['key_size']} + {p['value_size']} bytes, "
        f"{p['ops']} operations (at most {p.get('seconds', '?')} s) per engine, "
        f"{p['threads']} client thread(s), " + budget + reads
    )


if __name__ == "__main__":
    main(sys.argv[1])
