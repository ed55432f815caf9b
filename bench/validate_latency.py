"""Start-up cost of ptrain's light commands: `ptrain validate` on the largest shipped job (Llama 3.1 405B
on 16,384 GPUs) and `ptrain --help`, wall time and peak RSS, for one binary or two side by side (runs
interleaved, same machine, same time: --before an older build). Goal (issue: fast to start): validate
under 50 ms and 40 MB on a CUDA-enabled build. Writes bench/results/<date>-validate-latency.json.
    python3 bench/validate_latency.py [--ptrain build/ptrain] [--before OTHER_BINARY] [--runs 30]"""
import os
import statistics
import subprocess
import time

from results import ROOT, before_after, write_result


def one(binary, args):
    """Seconds and peak RSS (MiB) of one run."""
    start = time.perf_counter()
    p = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{binary} {' '.join(args)} failed")
    return seconds, usage.ru_maxrss / 1024


def main():
    binaries, runs = before_after(runs=30)
    commands = {"validate 405b/16k": ["validate", os.path.join(ROOT, "configs", "llama3-405b.yaml")],
                "--help": ["--help"]}
    samples = {(b, c): [] for b in binaries for c in commands}
    for _ in range(runs):
        for b, binary in binaries.items():
            for c, command in commands.items():
                samples[(b, c)].append(one(binary, command))
    rows = []
    for (b, c), runs in samples.items():
        ms = [s * 1000 for s, _ in runs]
        row = {"binary": b, "path": binaries[b], "command": c, "runs": len(runs), "min_ms": min(ms),
               "median_ms": statistics.median(ms), "max_ms": max(ms), "peak_rss_mib": max(r for _, r in runs)}
        rows.append(row)
        print(f"{b:6s} {c:18s} median {row['median_ms']:6.1f} ms (min {row['min_ms']:.1f}, max {row['max_ms']:.1f}), "
              f"peak RSS {row['peak_rss_mib']:.0f} MiB")
    write_result("validate-latency", {"machine": "this CPU", "rows": rows})


if __name__ == "__main__":
    main()
