#!/usr/bin/env python3
"""Write amplification against data size: tphdb, one-level tphdb and RocksDB.

Runs `tphdb bench fillrandom` once per size (tphdb and RocksDB side by side,
then tphdb in one-level mode), prints a table, and writes the rows as JSON
and the curves as an SVG plot. Needs a build with `--features peers`
(scripts/setup-peers.sh, then `cargo build --release -p tphdb-cli --features peers`).

    scripts/write_amp_curve.py --keys 1000000,4000000,16000000 \\
        --value-size 1024 --out target/write-amp-curve
"""

import argparse
import json
import math
import os
import subprocess
import sys

SERIES = ["tphdb", "tphdb-one-level", "rocksdb"]
COLORS = {"tphdb": "#1f77b4", "tphdb-one-level": "#2ca02c", "rocksdb": "#d62728"}
FIGURES = ["write_amp", "device_write_amp", "ops_per_sec", "space_mb", "peak_rss_mb",
           "worst_second_x_median"]


def run_bench(binary, keys, value_size, engines, one_level, out_dir, seconds):
    tag = f"{keys}-{'one-level' if one_level else 'leveled'}"
    json_path = os.path.join(out_dir, f"fillrandom-{tag}.json")
    cmd = [binary, "bench", "fillrandom", "--engines", engines, "--keys", str(keys),
           "--value-size", str(value_size), "--seconds", str(seconds),
           "--dir", out_dir, "--json", json_path]
    if one_level:
        cmd.append("--one-level")
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    with open(os.path.join(out_dir, f"fillrandom-{tag}.txt"), "w") as log:
        subprocess.run(cmd, check=True, stdout=log)
    with open(json_path) as f:
        return json.load(f)["results"]


def rows_of(results, keys, one_level):
    rows = []
    for r in results:
        name = r["engine"] + ("-one-level" if one_level and r["engine"] == "tphdb" else "")
        row = {"engine": name, "keys": keys, "ops": r.get("ops"), "error": r.get("error")}
        for k in FIGURES:
            row[k] = r.get(k)
        row["write_amp_breakdown"] = r.get("write_amp_breakdown")
        rows.append(row)
    return rows


def print_table(rows):
    cols = ["engine", "keys", "ops"] + FIGURES + ["x_rocksdb_write_amp", "x_rocksdb_device_write_amp"]
    rocks = {r["keys"]: r for r in rows if r["engine"] == "rocksdb"}
    for r in rows:
        b = rocks.get(r["keys"])
        for fig in ["write_amp", "device_write_amp"]:
            v = r.get(fig)
            r["x_rocksdb_" + fig] = (round(v / b[fig], 2)
                                     if b and v and b.get(fig) else None)
    print("  ".join(f"{c:>14}" for c in cols))
    for r in sorted(rows, key=lambda r: (SERIES.index(r["engine"]) if r["engine"] in SERIES
                                         else 99, r["keys"])):
        print("  ".join(f"{'-' if r.get(c) is None else r.get(c)!s:>14}" for c in cols))


def svg(rows, path, value_size):
    """A log-x line plot of write_amp (solid) and device_write_amp (dashed)."""
    w, h, left, right, top, bottom = 720, 440, 70, 170, 40, 60
    pts = [r for r in rows if r.get("write_amp") is not None and not r.get("error")]
    if not pts:
        return
    xs = sorted({r["keys"] for r in pts})
    x_lo, x_hi = math.log10(min(xs)), math.log10(max(xs))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    y_hi = max(max(r["write_amp"], r.get("device_write_amp") or 0) for r in pts) * 1.15

    def px(k):
        return left + (math.log10(k) - x_lo) / (x_hi - x_lo) * (w - left - right)

    def py(v):
        return h - bottom - v / y_hi * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">fillrandom, '
           f'{value_size}-byte values: write amplification by data size</text>']
    for i in range(6):
        v = y_hi * i / 5
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{py(v):.1f}" y2="{py(v):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{py(v) + 4:.1f}" '
                   f'text-anchor="end">{v:.1f}</text>')
    for k in xs:
        label = f"{k / 1e6:g}M keys" if k >= 1e6 else f"{k:,}"
        out.append(f'<text x="{px(k):.1f}" y="{h - bottom + 18}" text-anchor="middle">'
                   f'{label}</text>')
    out.append(f'<text x="18" y="{h / 2}" transform="rotate(-90 18 {h / 2})" '
               f'text-anchor="middle">bytes written per user byte</text>')
    legend_y = top + 10
    for name in SERIES:
        for fig, dash in [("write_amp", ""), ("device_write_amp", ' stroke-dasharray="5,4"')]:
            s = sorted((r["keys"], r[fig]) for r in pts if r["engine"] == name and r.get(fig))
            if not s:
                continue
            d = " ".join(f"{px(k):.1f},{py(v):.1f}" for k, v in s)
            out.append(f'<polyline points="{d}" fill="none" stroke="{COLORS[name]}" '
                       f'stroke-width="2"{dash}/>')
            for k, v in s:
                out.append(f'<circle cx="{px(k):.1f}" cy="{py(v):.1f}" r="3" '
                           f'fill="{COLORS[name]}"/>')
            label = name if fig == "write_amp" else f"{name} (device)"
            out.append(f'<line x1="{w - right + 10}" x2="{w - right + 34}" y1="{legend_y}" '
                       f'y2="{legend_y}" stroke="{COLORS[name]}" stroke-width="2"{dash}/>'
                       f'<text x="{w - right + 40}" y="{legend_y + 4}">{label}</text>')
            legend_y += 18
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", default="1000000,4000000,16000000",
                   help="comma-separated key counts")
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--seconds", type=int, default=1800,
                   help="time limit of each engine's fill")
    p.add_argument("--binary", default="target/release/tphdb")
    p.add_argument("--out", default="target/write-amp-curve",
                   help="directory for the databases, logs, JSON and SVG")
    p.add_argument("--no-one-level", action="store_true")
    p.add_argument("--replot", action="store_true",
                   help="run nothing: table, JSON and plot from the runs already in --out")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for keys in [int(k) for k in a.keys.split(",")]:
        for one_level in [False] if a.no_one_level else [False, True]:
            engines = "tphdb" if one_level else "tphdb,rocksdb"
            if a.replot:
                tag = f"{keys}-{'one-level' if one_level else 'leveled'}"
                path = os.path.join(a.out, f"fillrandom-{tag}.json")
                if not os.path.exists(path):
                    continue
                with open(path) as f:
                    results = json.load(f)["results"]
            else:
                results = run_bench(a.binary, keys, a.value_size, engines, one_level, a.out,
                                    a.seconds)
            rows += rows_of(results, keys, one_level)
        print_table(rows)
        with open(os.path.join(a.out, "write-amp-curve.json"), "w") as f:
            json.dump({"value_size": a.value_size, "rows": rows}, f, indent=1)
        svg(rows, os.path.join(a.out, "write-amp-curve.svg"), a.value_size)
    print(f"wrote {a.out}/write-amp-curve.json and {a.out}/write-amp-curve.svg")


if __name__ == "__main__":
    main()
