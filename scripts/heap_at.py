#!/usr/bin/env python3
"""The live heap by allocation site at chosen moments of a heaptrack
recording, which `heaptrack_print` shows only at the heap's own peak.

A bench's resident peak is seldom the heap's: memtables live in mappings
heaptrack does not see, so the moment that matters is one where a flush
runs beside whatever else holds memory. `--flushes` lists each flush's
window (while its list of the memtable is live) with the heap's highest
point in it; pass those times back to see what held the heap then.

    zstd -dc /tmp/fill.zst | scripts/heap_at.py --flushes
    zstd -dc /tmp/fill.zst | scripts/heap_at.py 120.5 135.2

`--timeline 5` prints the heap's highest point in each 5-second window
instead, for a run whose flushes the flush windows miss (several
memtables flushed together are not listed by `flush_list`).

`--grows 1` lists the allocations of 1 MB and more made by growing a
vector (a reallocation: for a moment the old block beside the new one,
which a resident high-water mark sees and a sampled heap does not), by
site, with how many and the largest.

Reads heaptrack's interpreted format (the `.zst` file after `zstd -d`):
`s` strings, `i` instruction pointers with their frames, `t` traces,
`a` allocation infos (size, trace), `+`/`-` allocations and frees of an
info, `c` timestamps in milliseconds.
"""

import argparse
import collections
import re
import sys

# A site is named by its innermost frames in these crates.
OUR_CRATES = ("tphdb",)
FLUSH_FRAME = "flush_list"
# A vector's growth (a reallocation), not a new allocation or a shrink.
GROW_FRAME = "finish_grow"


def clean(name):
    name = re.sub(r"::h[0-9a-f]{16}$", "", name)
    for a, b in (
        ("_$LT$impl$u20$", "<impl "),
        ("$GT$", ">"),
        ("$LT$", "<"),
        ("$u7b$$u7b$closure$u7d$$u7d$", "{closure}"),
        ("$u20$", " "),
        ("..", "::"),
    ):
        name = name.replace(a, b)
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("times", nargs="*", type=float, help="seconds into the run")
    ap.add_argument("--flushes", action="store_true", help="list flush windows")
    ap.add_argument(
        "--timeline",
        type=float,
        metavar="STEP",
        help="print the heap's highest point in each window of STEP seconds",
    )
    ap.add_argument(
        "--grows",
        type=float,
        metavar="MB",
        help="list growths of a vector to MB or more, by site",
    )
    ap.add_argument("--top", type=int, default=20, help="sites shown per moment")
    ap.add_argument("--depth", type=int, default=3, help="frames naming a site")
    args = ap.parse_args()

    times = sorted(args.times)
    strings = [""]
    frames = [[]]  # per instruction pointer: its function string indexes
    traces = [(0, 0)]  # (instruction pointer, parent trace)
    flush_trace = [False]
    sizes, alloc_trace, is_flush, live = [], [], [], []
    heap, flushes_live, now = 0, 0, 0.0
    snapshots, windows = [], []
    window = None  # (start, highest heap, its time)
    highs, timeline_step, timeline_high = [], None, None  # --timeline

    grows = collections.Counter()
    largest_grow = collections.Counter()
    grow_trace = [False]

    for line in sys.stdin.buffer:
        c = line[:1]
        if c == b"+":
            i = int(line[2:], 16)
            if args.grows and sizes[i] >= args.grows * 1e6 and grow_trace[alloc_trace[i]]:
                grows[alloc_trace[i]] += 1
                largest_grow[alloc_trace[i]] = max(largest_grow[alloc_trace[i]], sizes[i])
            live[i] += 1
            heap += sizes[i]
            flushes_live += is_flush[i]
        elif c == b"-":
            i = int(line[2:], 16)
            live[i] -= 1
            heap -= sizes[i]
            flushes_live -= is_flush[i]
        elif c == b"a":
            _, size, trace = line.split()
            sizes.append(int(size, 16))
            alloc_trace.append(int(trace, 16))
            is_flush.append(int(flush_trace[alloc_trace[-1]]))
            live.append(0)
        elif c == b"c":
            now = int(line[2:], 16) / 1000.0
            if args.timeline:
                step = int(now / args.timeline)
                if step != timeline_step:
                    if timeline_step is not None:
                        highs.append((timeline_step * args.timeline, timeline_high))
                    timeline_step, timeline_high = step, (heap, now)
                elif heap > timeline_high[0]:
                    timeline_high = (heap, now)
            while times and now >= times[0]:
                at = times.pop(0)
                snapshots.append((at, [(i, n) for i, n in enumerate(live) if n]))
            if flushes_live > 0:
                if window is None:
                    window = (now, heap, now)
                elif heap > window[1]:
                    window = (window[0], heap, now)
            elif window is not None:
                windows.append((window[0], now, window[1], window[2]))
                window = None
        elif c == b"t":
            _, ip, parent = line.split()
            ip, parent = int(ip, 16), int(parent, 16)
            traces.append((ip, parent))
            names = [strings[f] for f in frames[ip]]
            flush_trace.append(flush_trace[parent] or any(FLUSH_FRAME in n for n in names))
            grow_trace.append(grow_trace[parent] or any(GROW_FRAME in n for n in names))
        elif c == b"i":
            parts = line.split()
            frames.append([int(f, 16) for f in parts[3::3]])
        elif c == b"s":
            rest = line[2:].rstrip(b"\n").split(b" ", 1)
            strings.append(rest[1].decode("utf-8", "replace") if len(rest) > 1 else "")

    if args.flushes:
        for start, end, high, at in windows:
            print(f"flush {start:8.2f}-{end:8.2f} s  heap at most {high / 1e6:6.1f} MB at {at:.2f}")

    if args.timeline:
        if timeline_step is not None:
            highs.append((timeline_step * args.timeline, timeline_high))
        for start, (high, at) in highs:
            print(f"{start:8.2f} s  heap at most {high / 1e6:6.1f} MB at {at:.2f}")

    sites = {}

    def site(trace):
        if trace not in sites:
            names, t = [], trace
            while t and len(names) < args.depth:
                ip, parent = traces[t]
                for f in frames[ip]:
                    name = strings[f] if f < len(strings) else ""
                    if name.startswith(OUR_CRATES) and len(names) < args.depth:
                        names.append(clean(name))
                t = parent
            sites[trace] = " < ".join(names) or "(outside the engine)"
        return sites[trace]

    if args.grows:
        by_site = collections.Counter()
        largest = collections.Counter()
        for trace, n in grows.items():
            by_site[site(trace)] += n
            largest[site(trace)] = max(largest[site(trace)], largest_grow[trace])
        for name, n in sorted(by_site.items(), key=lambda kv: -kv[1] * largest[kv[0]])[: args.top]:
            print(f"{n:6d} growths, up to {largest[name] / 1e6:6.1f} MB  {name}")

    for at, held in snapshots:
        by_site = collections.Counter()
        for i, n in held:
            by_site[site(alloc_trace[i])] += n * sizes[i]
        print(f"=== {at:.2f} s: {sum(by_site.values()) / 1e6:.1f} MB live")
        for name, b in by_site.most_common(args.top):
            print(f"{b / 1e6:8.2f}  {name}")


if __name__ == "__main__":
    main()
