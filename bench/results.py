"""Where the benchmarks put their numbers: bench/results/<date>-<name>.json, stamped with the date
and the commit measured. `python3 bench/results.py --gpu-slug NAME` prints gpu_slug(NAME), for the
shell scripts.

A file written by write_as_measured() holds what its script measured and nothing else: its
"as_written" stamp is the sha256 of every other field but "derived", the one place for anything
added afterwards (a figure worked out later, a note), so an edit of a measured field shows:
`python3 bench/results.py --check FILE` exits 0 for a file as written, 1 otherwise."""
import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import time

AS_WRITTEN, DERIVED = "as_written", "derived"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gpu_slug(name):
    """A GPU's name as results files name it: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def write_result(name, fields):
    """Writes {date, commit, **fields} and returns the path written (commit: git's, else $BENCH_COMMIT):
    bench/results/<date>-<name>.json, or <date>-<name>-2.json, -3, ... where that day's file exists."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = commit or os.environ.get("BENCH_COMMIT", "unknown")  # a tree without .git, as on the GPU device
    out = {"date": datetime.date.today().isoformat(), "commit": commit, **fields}
    path = os.path.join(ROOT, "bench", "results", f"{out['date']}-{name}.json")
    again = 1
    while os.path.exists(path):  # a measurement of the same day is kept, not written over
        again += 1
        path = os.path.join(ROOT, "bench", "results", f"{out['date']}-{name}-{again}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))
    return path


def measured_digest(doc):
    """sha256 of a results document without its stamp and its "derived" field (keys sorted)."""
    kept = {k: v for k, v in doc.items() if k not in (AS_WRITTEN, DERIVED)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_as_measured(path, doc, writer):
    """Writes doc to path (atomically), with an empty "derived" and the stamp."""
    doc = {**doc, DERIVED: {}}
    doc[AS_WRITTEN] = {"by": writer, "sha256": measured_digest(doc),
                       "check": "python3 bench/results.py --check FILE; later figures go under \"derived\""}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def check_as_measured(path):
    """(True, what) when the file's measured fields are as its script wrote them."""
    with open(path) as f:
        doc = json.load(f)
    stamp = doc.get(AS_WRITTEN)
    if not isinstance(stamp, dict) or "sha256" not in stamp:
        return False, "no \"%s\" stamp: not written by write_as_measured()" % AS_WRITTEN
    if measured_digest(doc) != stamp["sha256"]:
        return False, "edited after %s wrote it: a field other than \"%s\" changed" % (stamp.get("by"), DERIVED)
    return True, "as %s wrote it (%d derived field(s) added since)" % (stamp.get("by"), len(doc.get(DERIVED) or {}))


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
    parser = argparse.ArgumentParser(description="results file names and stamps")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--gpu-slug", metavar="NAME", help="print the GPU name as results files name it")
    what.add_argument("--check", metavar="FILE", help="exit 0 if FILE's measured fields are as written, else 1")
    args = parser.parse_args()
    if args.gpu_slug is not None:
        print(gpu_slug(args.gpu_slug))
        sys.exit(0)
    try:
        ok, what = check_as_measured(args.check)
    except (OSError, ValueError) as e:
        print("error: --check %s: %s" % (args.check, e), file=sys.stderr)
        sys.exit(2)
    print("%s: %s" % (args.check, what))
    sys.exit(0 if ok else 1)
