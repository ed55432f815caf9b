"""What `ptrain run` allocates on rank 0 (metrics.jsonl `memory_bytes`: parameters, gradients,
optimizer state, ZeRO windows, activation arena, pipeline send buffers) against `ptrain validate
--json`'s prediction for the same rank of the same job, for GPT-2 124M (T 1024, micro-batch 1, CPU)
in fp32 and bf16 mixed precision under each recompute mode and ZeRO stage 0 (dp 1), then on two
pipeline stages (4 microbatches) under 1f1b, interleaved-1f1b and zb-h1, then on two tensor-parallel
ranks, with and without sequence parallelism, and with two pipeline stages, then on two and four
context-parallel ranks (with tp 2 and SP), then a 4-layer Mixtral of its width (4 experts of
ffn 3072, top 2) on one rank and on two expert-parallel ranks. Writes
bench/results/<date>-memory-vs-validate.json.
    python3 bench/memory_vs_validate.py [--ptrain build/ptrain]"""
from results import write_result
from run_vs_validate import job_in_tempdir, ptrain_from_args, run_and_validate

JOB = """\
name: memory-vs-validate
backend: cpu
model: {arch: gpt2, layers: 12, hidden: 768, heads: 12, vocab: 50257, seq_len: 1024}
train: {steps: 1, global_batch: 1, micro_batch: 1, precision: fp32, recompute: none}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 1, gpu: cpu}
logging: {every: 1, metrics: METRICS}
"""


def main():
    ptrain = ptrain_from_args()
    runs = []
    with job_in_tempdir(JOB) as (job, metrics):
        def layout(label, pp=1, tp=1, sp=False, schedule="1f1b", vpp=1, cp=1, dp=1, ep=0):
            flags = ["--set", f"parallel.pp={pp}", "--set", f"parallel.tp={tp}", "--set", f"parallel.cp={cp}", "--set",
                     f"parallel.sequence_parallel={'true' if sp else 'false'}", "--set", f"schedule.kind={schedule}",
                     "--set", f"schedule.virtual_stages={vpp}", "--set", f"cluster.gpus_per_node={pp * tp * cp * dp}"]
            if ep:  # the Mixtral: ep 1 on one rank, or expert parallel
                flags += ["--set", "model.arch=mixtral", "--set", "model.layers=4", "--set", "model.ffn_hidden=3072",
                          "--set", "model.moe={experts: 4, top_k: 2}", "--set", f"parallel.ep={ep}"]
            return label, flags + (["--set", f"train.global_batch={4 if pp > 1 else dp}"] if pp > 1 or dp > 1 else [])
        single = layout("pp 1")
        cases = [(p, m, single) for p in ["fp32", "bf16"] for m in ["none", "selective", "full"]]
        cases += [("fp32", "none", layout("1f1b", pp=2)),
                  ("fp32", "selective", layout("interleaved-1f1b", pp=2, schedule="interleaved-1f1b", vpp=2)),
                  ("fp32", "none", layout("zb-h1", pp=2, schedule="zb-h1")),
                  ("fp32", "none", layout("tp 2", tp=2)),
                  ("bf16", "selective", layout("tp 2 sp", tp=2, sp=True)),
                  ("fp32", "none", layout("tp 2 sp x 1f1b", pp=2, tp=2, sp=True)),
                  ("fp32", "none", layout("cp 2", cp=2)),
                  ("bf16", "selective", layout("cp 4", cp=4)),
                  ("fp32", "full", layout("cp 2 x tp 2 sp", cp=2, tp=2, sp=True)),
                  ("fp32", "none", layout("mixtral", ep=1)),
                  ("bf16", "selective", layout("mixtral", ep=1)),
                  ("fp32", "none", layout("mixtral dp 2 x ep 2", dp=2, ep=2))]
        for precision, mode, (pipeline, layout_flags) in cases:
            flags = ["--set", f"train.recompute={mode}", "--set", f"train.precision={precision}", *layout_flags]
            row, report = run_and_validate(ptrain, job, metrics, flags)
            allocated = row["memory_bytes"]
            predicted = next(r for r in report["memory_per_rank"] if r["rank"] == 0)["total_bytes"]
            runs.append({"precision": precision, "recompute": mode, "layout": pipeline,
                         "allocated_bytes": allocated, "predicted_bytes": predicted, "ratio": allocated / predicted})
            print(f"gpt2-124m {precision} recompute {mode:9s} {pipeline:16s}: allocated "
                  f"{allocated / 2**20:8.1f} MiB, predicted {predicted / 2**20:8.1f} MiB, "
                  f"ratio {allocated / predicted:.5f}")
    write_result("memory-vs-validate", {"device": "cpu", "runs": runs})


if __name__ == "__main__":
    main()
