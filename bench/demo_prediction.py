"""The demo's step against its prediction (issue 44 item 1): scripts/demo_train.sh as the demo runs it
(`ptrain profile --quick --nproc 2`, then configs/tiny-cpu.yaml trained with that profile), shortened
to --steps steps in a temporary directory, and the step row of the run's closing table (the median
step against validate's prediction from the profile); beside it validate's step at peak x 60%, what
the demo predicted before it measured the machine. Each pass measures its own profile.
    python3 bench/demo_prediction.py [--ptrain build/ptrain] [--steps 30] [--passes 3] [--check TOL]
Writes bench/results/<date>-demo-prediction.json; with --check TOL it is the test `demo_prediction`
(exit 1 unless the median pass's measured/predicted is within TOL, and writes nothing). The data is
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


def one_pass(ptrain, steps, d):
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
    header, row = HEADER.search(r.stdout), STEP_ROW.search(r.stdout)
    if not header or not row:
        raise SystemExit("the run printed no step against its prediction:\n" + r.stdout[-3000:])
    measured, predicted = float(row.group(1)), float(row.group(2))

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
            "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--check", type=float, metavar="TOL")
    args = parser.parse_args()
    passes = []
    for number in range(1, args.passes + 1):
        with tempfile.TemporaryDirectory() as d:
            p = one_pass(args.ptrain, args.steps, d)
        passes.append(p)
        print(f"pass {number}: step {p['measured_s']:.4f} s measured, {p['predicted_s']:.4f} s predicted "
              f"({p['compute_model']}): {p['measured_over_predicted']:.2f}x; peak x 60% {p['peak_predicted_s']:.4f} s: "
              f"{p['measured_over_peak']:.2f}x; profile and run {p['demo_train_wall_s']:.0f} s"
              + (f"; the profile's doubts: {len(p['profile_doubts'])}" if p["profile_doubts"] else "")
              + f"; load average {p['load_average_1m']['before']:.1f} -> {p['load_average_1m']['after']:.1f}",
              flush=True)
    ratios = [p["measured_over_predicted"] for p in passes]
    median = statistics.median(ratios)
    print(f"measured/predicted: median {median:.2f} (passes {', '.join(f'{r:.2f}' for r in ratios)}); at peak x 60%: "
          + ", ".join(f"{p['measured_over_peak']:.2f}" for p in passes))
    if args.check is not None:
        if abs(median - 1) > args.check:
            print(f"FAIL: the demo's step is {median:.2f}x its prediction, outside {args.check:.0%}")
            return 1
        print(f"the demo's step is within {args.check:.0%} of its prediction")
        return 0
    write_result("demo-prediction", {"machine": "this CPU (scripts/demo_train.sh: ptrain profile --quick --nproc 2)",
                                     "steps": args.steps, "passes": passes,
                                     "median_measured_over_predicted": median})
    return 0


if __name__ == "__main__":
    sys.exit(main())
