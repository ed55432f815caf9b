"""Two ptrain binaries' CPU step time on cpu_vs_torch.py's models, interleaved: is a change slower?

Runs `--rounds` rounds; each round times every model with the `--before` binary, then the `--after`
one (cpu_vs_torch.ptrain_step_seconds: the median step of one run after two warm-up steps), so
that the machine's drift falls on both alike. Records every round's figure, the medians and the
spread (max - min over the rounds, relative to the median), the load average before and after, and
the ratio after / before of the medians. --precision bf16 runs the same models in bf16 (the CPU
widens bf16 operands into fp32 temporaries: kernels/cpu/bf16_staging.h), --precision fp8 in FP8
(the CPU's emulation, docs/fp8.md) under --fp8-scaling (delayed, the default, or current). Writes
bench/results/<date>-cpu-before-after.json (--out to name another file).

  /usr/bin/python3 bench/cpu_before_after.py --before /tmp/before/build/ptrain --after build/ptrain \
      --before-commit 29083ad --after-commit 8dd412f [--threads 2] [--steps 12] [--rounds 3]
"""
import argparse
import datetime
import json
import os
import platform
import statistics

from cpu_vs_torch import SHAPES, ptrain_step_seconds


def summary(times):
    median = statistics.median(times)
    return {"rounds_s": times, "median_s": median, "spread": (max(times) - min(times)) / median}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--before-commit", required=True)
    ap.add_argument("--after-commit", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp8"], default="fp32")
    ap.add_argument("--fp8-scaling", choices=["delayed", "current"], default="delayed")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()
    times = {name: {"before": [], "after": []} for name in SHAPES}
    for r in range(args.rounds):
        for name, shape in SHAPES.items():
            for side in ["before", "after"]:
                t = ptrain_step_seconds(getattr(args, side), shape, args.steps, args.threads, args.precision,
                                        args.fp8_scaling)
                times[name][side].append(t)
                print(f"round {r + 1} {name:6s} {side:6s} {t * 1e3:8.1f} ms/step", flush=True)
    rows = []
    for name, sides in times.items():
        before, after = summary(sides["before"]), summary(sides["after"])
        rows.append({"model": name, "shape": SHAPES[name], "before": before, "after": after,
                     "after_over_before": after["median_s"] / before["median_s"]})
        print(f"{name:6s} before {before['median_s'] * 1e3:8.1f} ms (spread {before['spread']:.1%})  "
              f"after {after['median_s'] * 1e3:8.1f} ms (spread {after['spread']:.1%})  "
              f"after/before {rows[-1]['after_over_before']:.3f}")
    result = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "threads": args.threads, "steps": args.steps, "rounds": args.rounds,
              "precision": args.precision, "fp8_scaling": args.fp8_scaling if args.precision == "fp8" else None,
              "before_commit": args.before_commit, "after_commit": args.after_commit,
              "load_average_1_5_15_at_start": load_before, "load_average_1_5_15_at_end": os.getloadavg(),
              "rows": rows}
    out = args.out or os.path.join(os.path.dirname(__file__), "results", f"{result['date']}-cpu-before-after.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
