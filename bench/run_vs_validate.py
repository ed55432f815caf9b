"""What the run-against-validate benchmarks share: a job file in a temporary directory, run by
`ptrain run` and estimated by `ptrain validate --json` under the same --set flags."""
import contextlib
import json
import os
import subprocess
import tempfile


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
