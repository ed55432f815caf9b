"""validate's prediction of each job in configs/published/ against the throughput its source
published (figure, source and bound in the job's header), under the job's own time model and, for
comparison, at peak x 60% (cluster.profile: peak). Writes bench/results/<date>-published-vs-validate.json.
The test PublishedJobs (tests/cli/test_cli.py) keeps every job within its header's bound through
`predicted_over_published` below.
    python3 bench/published_vs_validate.py [--ptrain build/ptrain]"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess

from results import ROOT, write_result


def published(path):
    """The job header's figure: ("tokens_per_s_per_gpu" | "tflops_per_gpu", value), and its bound."""
    with open(path) as f:
        text = f.read()
    bound = float(re.search(r"^# bound: ([0-9.]+)$", text, re.M).group(1))
    for kind in ("tokens_per_s_per_gpu", "tflops_per_gpu"):
        m = re.search(rf"^# published_{kind}: ([0-9.]+)$", text, re.M)
        if m:
            return kind, float(m.group(1)), bound
    raise ValueError(f"{path}: no published figure in the header")


def predicted_over_published(ptrain, path, *flags):
    """validate's per-GPU throughput of the job over the published one, and validate's report."""
    r = subprocess.run([ptrain, "validate", path, "--json", *flags], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"validate {path} failed: {r.stderr}")
    d = json.loads(r.stdout)
    kind, figure, _ = published(path)
    per_gpu = (d["tokens_per_step"] if kind == "tokens_per_s_per_gpu" else d["flops_per_step"] / 1e12)
    return per_gpu / d["step_time_s"] / d["world"] / figure, d


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    args = parser.parse_args()
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "published", "*.yaml"))):
        kind, figure, bound = published(path)
        ratio, report = predicted_over_published(args.ptrain, path)
        peak, _ = predicted_over_published(args.ptrain, path, "--set", "cluster.profile=peak")
        rows.append({"job": os.path.basename(path), "published": {kind: figure}, "bound": bound,
                     "compute_model": report["compute_model"], "predicted_over_published": ratio,
                     "peak_model_predicted_over_published": peak})
        print(f"{rows[-1]['job']:36s} {ratio:5.2f}  (peak x 60%: {peak:5.2f})  {report['compute_model'][:60]}")
    ratios = [r["predicted_over_published"] for r in rows]
    print(f"median |predicted/published - 1| {statistics.median(abs(r - 1) for r in ratios):.3f}, "
          f"worst {max(abs(r - 1) for r in ratios):.3f}")
    write_result("published-vs-validate", {"jobs": rows})


if __name__ == "__main__":
    main()
