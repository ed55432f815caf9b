"""Where the benchmarks put their numbers: bench/results/<date>-<name>.json, stamped with the date
and the commit measured."""
import datetime
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_result(name, fields):
    """Writes {date, commit, **fields} and returns the path written."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {"date": datetime.date.today().isoformat(), "commit": commit, **fields}
    path = os.path.join(ROOT, "bench", "results", f"{out['date']}-{name}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))
    return path
