#!/usr/bin/env python3
"""Summarizes the runs in docs/benchmarks as Markdown tables: throughput of
every engine per run, and tphdb's ratios to RocksDB (both setups). Reads
each run's <name>.summary.json, the committed digest of its JSON (the
JSON itself is not committed), so that a run of a few workloads keeps the
others' rows. Used by scripts/benchmarks.sh; prints to standard output.

`bench_summary.py --digest RUN.json` prints the digest of one run."""

import glob
import json
import os
import sys

ENGINES = ["tphdb", "rocksdb", "rocksdb-tuned", "lmdb", "leveldb", "fjall", "redb", "pogreb"]
# What the tables below read of an engine's result.
FIELDS = [
    "engine",
    "ops_per_sec",
    "read_ops_per_sec",
    "p99_us",
    "write_amp",
    "read_amp",
    "space_mb",
    "peak_rss_mb",
    "worst_second_x_median",
    "error",
]


def digest(run):
    return {"results": [{k: r[k] for k in FIELDS if r.get(k) is not None} for r in run["results"]]}


def fmt(v):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "—"


def main(out_dir, order):
    runs = []
    suffix = ".summary.json"
    for name in order:
        for path in [os.path.join(out_dir, f"{name}{suffix}")] + sorted(
            glob.glob(os.path.join(out_dir, f"{name}_*{suffix}"))
        ):
            if os.path.exists(path):
                runs.append((os.path.basename(path)[: -len(suffix)], json.load(open(path))))
    print("| run | " + " | ".join(ENGINES) + " | tphdb ÷ rocksdb | tphdb ÷ tuned |")
    print("|---" * (len(ENGINES) + 3) + "|")
    for name, run in runs:
        by = {r["engine"]: r for r in run["results"]}
        ops = {}
        for e in ENGINES:
            r = by.get(e)
            if r is None:
                ops[e] = None
            elif "error" in r:
                ops[e] = "failed"
            else:
                # Pogreb's own workload reports its read phase as the run.
                ops[e] = r.get("read_ops_per_sec") or r.get("ops_per_sec")
        t, rk, tu = (ops.get(e) for e in ("tphdb", "rocksdb", "rocksdb-tuned"))
        num = lambda v: v if isinstance(v, (int, float)) else None  # noqa: E731
        print(
            f"| {name} | "
            + " | ".join(fmt(ops[e]) for e in ENGINES)
            + f" | {ratio(num(t), num(rk))} | {ratio(num(t), num(tu))} |"
        )
    print()
    print("Operations per second of the measured phase (for `pogreb`, its read")
    print("phase; for fills, the fill). — : not run.")
    print()
    print("| run | engine | p99 µs | write amp | read amp | space MB | peak RSS MB | worst second ÷ median |")
    print("|---|---|---|---|---|---|---|---|")
    for name, run in runs:
        for r in run["results"]:
            if r["engine"] not in ENGINES or "error" in r:
                continue
            print(
                f"| {name} | {r['engine']} | {fmt(r.get('p99_us'))} | {fmt(r.get('write_amp'))} | "
                f"{fmt(r.get('read_amp'))} | {fmt(r.get('space_mb'))} | {fmt(r.get('peak_rss_mb'))} | "
                f"{fmt(r.get('worst_second_x_median'))} |"
            )


if __name__ == "__main__":
    if sys.argv[1] == "--digest":
        json.dump(digest(json.load(open(sys.argv[2]))), sys.stdout, indent=1)
        print()
    else:
        main(sys.argv[1], sys.argv[2].split())
