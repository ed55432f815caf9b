"""What the run-against-validate benchmarks share: a job file in a temporary directory, run by
`ptrain run` and estimated by `ptrain validate --json` under the same --set flags."""
import argparse
import contextlib
import json
import os
import subprocess
import tempfile

from results import ROOT


def ptrain_from_args():
    """The binary to run: --ptrain, by default the repository's build/ptrain."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ptrain", default=os.path.join(ROOT, "build", "ptrain"))
    return parser.parse_args().ptrain


@contextlib.contextmanager
def job_in_tempdir(text):
    """Writes `text` (METRICS replaced by the metrics file's path) as a job; yields (job, metrics)."""
    with tempfile.TemporaryDirectory() as d:
        job, metrics = os.path.join(d, "job.yaml"), os.path.join(d, "metrics.jsonl")
        with open(job, "w") as f:
            f.write(text.replace("METRICS", metrics))
        yield job, metrics


def run_and_validate(ptrain, job, metrics, flags):
    """The last metrics row of a fresh `ptrain run` and the `ptrain validate --json` report."""
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([ptrain, "run", job, *flags], check=True, capture_output=True)
    with open(metrics) as f:
        row = json.loads(f.readlines()[-1])
    report = json.loads(subprocess.run([ptrain, "validate", job, "--json", *flags], check=True, capture_output=True,
                                       text=True).stdout)
    return row, report
