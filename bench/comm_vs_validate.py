"""The bytes each axis sends per step in `ptrain run` (metrics.jsonl `comm_bytes`: the Comm's count of
every collective and message on the axis's groups, in the plan's ring convention, the most over the
ranks) against `ptrain validate --json`'s `comm_bytes_per_step` for the same job, over data, tensor
(with and without sequence parallelism), context and pipeline layouts of a small Llama on CPU, and data,
expert and pipeline layouts of its Mixtral (4 experts, top 2). The last of 4
steps is compared (ZeRO's parameter gathers after an update count in the next step). Writes
bench/results/<date>-comm-vs-validate.json.
    python3 bench/comm_vs_validate.py [--ptrain build/ptrain]"""
from results import write_result
from run_vs_validate import job_in_tempdir, ptrain_from_args, run_and_validate

JOB = """\
name: comm-vs-validate
backend: cpu
model: {arch: llama, layers: 4, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, seq_len: 32}
train: {steps: 4, global_batch: 8, micro_batch: 2, precision: fp32, recompute: selective}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
logging: {every: 4, metrics: METRICS}
"""

LAYOUTS = [
    ("dp 2, zero 0", dict(dp=2, zero=0)),
    ("dp 2, zero 1", dict(dp=2, zero=1)),
    ("dp 2, zero 3", dict(dp=2, zero=3)),
    ("tp 2", dict(tp=2)),
    ("tp 4 (shared kv heads)", dict(tp=4)),
    ("tp 2, sp", dict(tp=2, sp=True)),
    ("pp 2, 1f1b", dict(pp=2)),
    ("tp 2 sp x pp 2, zb-h1", dict(tp=2, pp=2, sp=True, schedule="zb-h1")),
    ("tp 2 x dp 2, zero 2, full recompute", dict(tp=2, dp=2, zero=2, recompute="full")),
    ("cp 2", dict(cp=2)),
    ("cp 4", dict(cp=4)),
    ("cp 2 x tp 2 sp", dict(cp=2, tp=2, sp=True)),
    ("cp 2 x pp 2, zb-h1, full recompute", dict(cp=2, pp=2, schedule="zb-h1", recompute="full")),
    ("mixtral dp 2, zero 3", dict(moe=True, dp=2, zero=3)),
    ("mixtral dp 2 x ep 2, zero 1", dict(moe=True, dp=2, ep=2, zero=1)),
    ("mixtral dp 4 x ep 4, zero 2", dict(moe=True, dp=4, ep=4, zero=2)),
    ("mixtral dp 4 x ep 2, zero 3", dict(moe=True, dp=4, ep=2, zero=3)),
    ("mixtral tp 2 sp x ep 2 x dp 2, zero 1", dict(moe=True, tp=2, sp=True, ep=2, dp=2, zero=1)),
    ("mixtral dp 2 x ep 2 x pp 2, zb-h1, full", dict(moe=True, dp=2, ep=2, pp=2, schedule="zb-h1", recompute="full")),
]


def flags(layout):
    tp, pp, dp, cp = layout.get("tp", 1), layout.get("pp", 1), layout.get("dp", 1), layout.get("cp", 1)
    out = {"parallel.tp": tp, "parallel.pp": pp, "parallel.cp": cp, "parallel.zero": layout.get("zero", 0),
           "parallel.sequence_parallel": "true" if layout.get("sp") else "false",
           "schedule.kind": layout.get("schedule", "1f1b"), "cluster.gpus_per_node": tp * pp * dp * cp,
           "train.recompute": layout.get("recompute", "selective"), "parallel.ep": layout.get("ep", 1)}
    if layout.get("moe"):
        out.update({"model.arch": "mixtral", "model.moe": "{experts: 4, top_k: 2}"})
    return [a for k, v in out.items() for a in ("--set", f"{k}={v}")]


def main():
    ptrain = ptrain_from_args()
    runs = []
    with job_in_tempdir(JOB) as (job, metrics):
        for name, layout in LAYOUTS:
            row, report = run_and_validate(ptrain, job, metrics, flags(layout))
            measured, predicted = row["comm_bytes"], report["comm_bytes_per_step"]
            row = {"layout": name}
            text = []
            for axis in ("tp", "pp", "dp", "cp", "ep"):
                m, p = measured[axis], predicted[axis]
                row[axis] = {"measured_bytes": m, "predicted_bytes": p, "ratio": m / p if p else None}
                if m or p:
                    text.append(f"{axis} {m / 1e6:8.3f} / {p / 1e6:8.3f} MB" + (f" ({m / p:.4f})" if p else ""))
            runs.append(row)
            print(f"{name:36s} " + "  ".join(text))
    write_result("comm-vs-validate", {"device": "cpu", "model": "llama 4 layers, hidden 64, T 32",
                                      "runs": runs})


if __name__ == "__main__":
    main()
