#!/usr/bin/env python3
"""Per-kernel time table from Nsight Compute's raw CSV (bench/kernel_profile.sh writes it).

Groups the profiled launches by kernel name (template arguments kept, parameters dropped), sums
gpu__time_duration, and prints count, total ms, mean us and share of the total, largest first.

    python3 bench/kernel_table.py ncu.csv [--top 40] [--json out.json]
"""
import argparse
import csv
import json
import re
import sys

METRIC = "gpu__time_duration.sum"


def short_name(name):
    """'void ns::kernel<...>(float*, int)' -> 'ns::kernel<...>' (no 'void', no parameter list)."""
    name = re.sub(r"^void ", "", name.strip())
    depth = 0
    for i, ch in enumerate(name):  # cut at the '(' of the parameter list, outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


def read_launches(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.readlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        raise SystemExit("error: %s has no Nsight Compute raw CSV header (\"Kernel Name\")" % path)
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    try:
        name_col, time_col = header.index("Kernel Name"), header.index(METRIC)
    except ValueError:
        raise SystemExit("error: %s lacks the columns 'Kernel Name' and '%s'" % (path, METRIC))
    unit = None
    launches = []
    for row in rows[1:]:
        if len(row) <= max(name_col, time_col):
            continue
        value = row[time_col].replace(",", "")
        try:
            launches.append((short_name(row[name_col]), float(value)))
        except ValueError:  # the units row under the header ("nsecond", "usecond", ...)
            unit = row[time_col] or unit
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit, 1e-6)
    return [(name, t * scale) for name, t in launches]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--json", default=None, help="also write the whole table here")
    args = ap.parse_args()
    launches = read_launches(args.csv)
    if not launches:
        raise SystemExit("error: no profiled kernel launches in %s" % args.csv)
    table = {}
    for name, ms in launches:
        count, total = table.get(name, (0, 0.0))
        table[name] = (count + 1, total + ms)
    total_ms = sum(t for _, t in table.values())
    ranked = sorted(table.items(), key=lambda kv: -kv[1][1])
    print("%d launches, %.2f ms of kernel time" % (len(launches), total_ms))
    print("%9s %6s %9s %6s  %s" % ("total ms", "count", "mean us", "share", "kernel"))
    for name, (count, ms) in ranked[: args.top]:
        print("%9.3f %6d %9.1f %5.1f%%  %s" % (ms, count, 1000.0 * ms / count, 100.0 * ms / total_ms, name[:150]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"launches": len(launches), "kernel_ms": total_ms,
                       "kernels": [{"name": n, "count": c, "ms": m} for n, (c, m) in ranked]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
