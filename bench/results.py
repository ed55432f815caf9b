"""Where the benchmarks put their numbers: bench/results/<date>-<name>.json, stamped with the date
and the commit measured. `python3 bench/results.py --gpu-slug NAME` prints gpu_slug(NAME), for the
shell scripts."""
import argparse
import datetime
import json
import os
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpu_slug(name):
    """A GPU's name as results files name it: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def write_result(name, fields):
    """Writes {date, commit, **fields} and returns the path written (commit: git's, else $BENCH_COMMIT)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = commit or os.environ.get("BENCH_COMMIT", "unknown")  # a tree without .git, as on the GPU device
    out = {"date": datetime.date.today().isoformat(), "commit": commit, **fields}
    path = os.path.join(ROOT, "bench", "results", f"{out['date']}-{name}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))
    return path


def before_after(runs, parser=None):
    """Parses --ptrain (the build timed, "after"), --before (an older binary timed beside it, runs
    interleaved) and --runs, besides what the caller's parser already has; returns ({name: binary},
    runs), "before" first when given, or with a parser given ({name: binary}, parsed args)."""
    own = parser is None
    parser = parser or argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    parser.add_argument("--before", help="another ptrain binary to time in the same run")
    parser.add_argument("--runs", type=int, default=runs)
    args = parser.parse_args()
    binaries = {"after": args.ptrain}
    if args.before:
        binaries = {"before": args.before, **binaries}
    return (binaries, args.runs) if own else (binaries, args)


def run_job(binary, d, job_text, flags=()):
    """Writes `job_text` (its metrics file: "{metrics}") to d/job.yaml and runs it with `binary`;
    returns (the metrics' step records, ptrain's stderr, wall seconds). A failed run ends the
    benchmark with its stderr."""
    metrics = os.path.join(d, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    job = os.path.join(d, "job.yaml")
    with open(job, "w") as f:
        f.write(job_text.replace("{metrics}", metrics))
    start = time.perf_counter()
    r = subprocess.run([binary, "run", job, *flags], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{binary} run exited {r.returncode}:\n{r.stderr[-4000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"step_s"' in line], r.stderr, wall


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="results file names")
    parser.add_argument("--gpu-slug", required=True, metavar="NAME", help="print the GPU name as results files name it")
    print(gpu_slug(parser.parse_args().gpu_slug))
