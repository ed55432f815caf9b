"""The demo's step against its prediction (issue 44 item 1): scripts/demo_train.sh as the demo runs it
(`ptrain profile --quick --nproc 2`, then configs/tiny-cpu.yaml trained with that profile), shortened
to --steps steps in a temporary directory, and the step row of the run's closing table (the median
step against validate's prediction from the profile); beside it validate's step at peak x 60%, what
the demo predicted before it measured the machine. Each pass measures its own profile.
With --layouts each pass also runs the demo's job in the layouts its comments suggest (issue 44 item
8: tp 2 with sequence parallelism, pp 2, full recompute; the demo itself is dp 2 with ZeRO-1) with
the same profile, each judged by its own closing table.
    python3 bench/demo_prediction.py [--ptrain build/ptrain] [--steps 30] [--passes 3] [--layouts]
                                     [--check TOL] [--check-layouts TOL] [--retry-passes N]
Writes bench/results/<date>-demo-prediction.json (with --layouts -demo-layouts-prediction.json); with
--check TOL it is the test `demo_prediction` (exit 1 unless the median pass's measured/predicted is
within TOL -- each layout's within --check-layouts TOL, default TOL -- and writes nothing; a job
outside is measured in --retry-passes more passes and judged by the median of all). The data is
data/tiny where scripts/prepare_tiny_data.sh made it, else synthetic tokens (the step's time does
not depend on them). Each pass records the machine's 1-minute load average before and after: on a
shared machine the profile and the run meet other work, and its doubts (`profile_doubts`) say so."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from results import ROOT, write_result

STEP_ROW = re.compile(r"^  step\s+([0-9.]+) s\s+([0-9.]+) s\s+([0-9.]+)x$", re.M)
HEADER = re.compile(r"step time, measured \(median of (\d+) steps\) against predicted \((.*)\):")
DEMO = "dp 2 ZeRO-1 (the demo)"
LAYOUTS = {"tp 2 SP": ["parallel.tp=2", "parallel.sequence_parallel=true"], "pp 2": ["parallel.pp=2"],
           "full recompute": ["train.recompute=full"]}


def step_row(stdout, what):
    """(measured, predicted, compute model) of a run's closing table."""
    header, row = HEADER.search(stdout), STEP_ROW.search(stdout)
    if not header or not row:
        raise SystemExit(f"{what} printed no step against its prediction:\n" + stdout[-3000:])
    return float(row.group(1)), float(row.group(2)), header


def one_pass(ptrain, steps, d, layouts):
    profile = os.path.join(d, "profile.json")
    sets = ["--set", f"train.steps={steps}", "--set", "checkpoint.dir=" + os.path.join(d, "ckpt"),
            "--set", "logging.metrics=" + os.path.join(d, "metrics.jsonl")]
    if not os.path.exists(os.path.join(ROOT, "data", "tiny", "manifest.json")):
        sets += ["--set", "data.format=synthetic"]
    env = dict(os.environ, PROFILE=profile, BUILD_DIR=os.path.dirname(os.path.abspath(ptrain)))
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo_train.sh"), *sets], env=env, cwd=ROOT,
                       capture_output=True, text=True)
    wall = time.monotonic() - started
    if r.returncode != 0:
        raise SystemExit(f"scripts/demo_train.sh failed ({r.returncode}):\n{r.stderr[-3000:]}")
    measured, predicted, header = step_row(r.stdout, "the demo's run")
    others = {}
    for name, overrides in LAYOUTS.items() if layouts else ():
        r = subprocess.run([ptrain, "run", os.path.join(ROOT, "configs", "tiny-cpu.yaml"), *sets,
                            "--set", "cluster.profile=" + profile,
                            "--set", "checkpoint.dir=" + os.path.join(d, "ckpt-" + name.replace(" ", "-")),
                            "--set", "logging.metrics=" + os.path.join(d, name.replace(" ", "-") + ".jsonl"),
                            *[x for o in overrides for x in ("--set", o)]], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"the demo at {name} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        m, p, _ = step_row(r.stdout, f"the demo at {name}")
        others[name] = {"overrides": overrides, "measured_s": m, "predicted_s": p, "measured_over_predicted": m / p}

    def validate(model):
        out = subprocess.run([ptrain, "validate", os.path.join(ROOT, "configs", "tiny-cpu.yaml"), "--json", *sets,
                              "--set", "cluster.profile=" + model], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout
        return json.loads(out)

    peak = validate("peak")
    with open(profile) as f:
        doubts = json.load(f).get("doubts", [])
    return {"measured_s": measured, "predicted_s": predicted, "measured_over_predicted": measured / predicted,
            "compute_model": header.group(2), "steps_in_median": int(header.group(1)),
            "peak_predicted_s": peak["step_time_s"], "measured_over_peak": measured / peak["step_time_s"],
            "profile_doubts": doubts, "demo_train_wall_s": wall,
            "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}, "layouts": others}


def ratios_of(passes):
    """Each job's measured/predicted, pass by pass: the demo's and each layout's."""
    jobs = {DEMO: [p["measured_over_predicted"] for p in passes]}
    for name in passes[0]["layouts"]:
        jobs[name] = [p["layouts"][name]["measured_over_predicted"] for p in passes]
    return jobs


def outside(jobs, args):
    return [name for name, ratios in jobs.items()
            if abs(statistics.median(ratios) - 1) > (args.check if name == DEMO else args.check_layouts)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--layouts", action="store_true")
    parser.add_argument("--check", type=float, metavar="TOL")
    parser.add_argument("--check-layouts", type=float, metavar="TOL")
    parser.add_argument("--retry-passes", type=int, default=0)
    args = parser.parse_args()
    if args.check_layouts is None:
        args.check_layouts = args.check
    passes = []

    def measure(count):
        for _ in range(count):
            with tempfile.TemporaryDirectory() as d:
                p = one_pass(args.ptrain, args.steps, d, args.layouts)
            passes.append(p)
            print(f"pass {len(passes)}: step {p['measured_s']:.4f} s measured, {p['predicted_s']:.4f} s predicted "
                  f"({p['compute_model']}): {p['measured_over_predicted']:.2f}x; peak x 60% {p['peak_predicted_s']:.4f} s: "
                  f"{p['measured_over_peak']:.2f}x; profile and run {p['demo_train_wall_s']:.0f} s"
                  + (f"; the profile's doubts: {len(p['profile_doubts'])}" if p["profile_doubts"] else "")
                  + f"; load average {p['load_average_1m']['before']:.1f} -> {p['load_average_1m']['after']:.1f}"
                  + "".join(f"; {name} {o['measured_s']:.4f} s / {o['predicted_s']:.4f} s = {o['measured_over_predicted']:.2f}x"
                            for name, o in p["layouts"].items()),
                  flush=True)

    measure(args.passes)
    if args.check is not None and outside(ratios_of(passes), args) and args.retry_passes > 0:
        print(f"outside: {', '.join(outside(ratios_of(passes), args))}; {args.retry_passes} more passes")
        measure(args.retry_passes)
    jobs = ratios_of(passes)
    for name, ratios in jobs.items():
        print(f"{name}: measured/predicted median {statistics.median(ratios):.2f} "
              f"(passes {', '.join(f'{r:.2f}' for r in ratios)})")
    print("the demo at peak x 60%: " + ", ".join(f"{p['measured_over_peak']:.2f}" for p in passes))
    if args.check is not None:
        failed = outside(jobs, args)
        for name in failed:
            print(f"FAIL: {name}: the step is {statistics.median(jobs[name]):.2f}x its prediction, outside "
                  f"{args.check if name == DEMO else args.check_layouts:.0%}")
        if failed:
            return 1
        print(f"every job within its tolerance (the demo {args.check:.0%}, layouts {args.check_layouts:.0%})")
        return 0
    write_result("demo-layouts-prediction" if args.layouts else "demo-prediction",
                 {"machine": "this CPU (scripts/demo_train.sh: ptrain profile --quick --nproc 2)",
                  "steps": args.steps, "passes": passes,
                  "median_measured_over_predicted": {name: statistics.median(r) for name, r in jobs.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
