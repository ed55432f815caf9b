"""NCCL end to end, on GPUs: with every collective and pipeline send going through NCCL, dp 2 (ZeRO 1
and 3), tp 2 with SP, pp 2 (1f1b, interleaved 1f1b, with and without a cap on the microbatches in
flight) and ep 2 train one rank's loss curve (fp32,
relative 1e-4), and a stalled rank ends the job at the collective timeout through ncclCommAbort,
with the collective log.

Two ways to put the ranks on GPUs:
  default     the local launcher (`ptrain run --nproc 2`), one GPU per rank: needs two GPUs
  --one-gpu   two ranks on GPU 0, started torchrun-style, each with its own NCCL_HOSTID: NCCL tells
              GPUs apart by host and bus id, so it takes the ranks for two hosts and connects them
              over loopback sockets (NCCL_NET=Socket, NCCL_SOCKET_IFNAME=lo) instead of refusing a
              "Duplicate GPU"; ptrain's offer follows the same rule (app/worker_process.cpp)
Without the GPUs a mode needs, every test skips itself.
    python3 tests/comm/test_nccl.py --ptrain build/ptrain [--one-gpu] [-v] [Class.test_name]
scripts/nccl_check.sh runs this with the NCCL Comm tests on a multi-GPU node in one command."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PTRAIN = ""
ONE_GPU = False
TOLERANCE = 1e-4  # relative, fp32: NCCL's reductions sum in another order than one rank's GEMMs

JOB = """\
name: nccl-test
backend: cuda
model: {{arch: {arch}, layers: 4, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 96, seq_len: 32{moe}}}
parallel: {{zero: {zero}, pp: {pp}, tp: {tp}, cp: {cp}, cp_comm: {cp_comm}, ep: {ep}, sequence_parallel: {sp}, offload: {offload}}}
schedule: {{kind: {schedule}, virtual_stages: {vpp}, max_in_flight: {max_in_flight}}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 1, precision: fp32, seed: 5}}
optimizer: {{lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 4}}
data: {{format: synthetic, eval_every: 0}}
checkpoint: {{dir: null}}
cluster: {{nodes: 1, gpus_per_node: {world}, gpu: h100-sxm}}
logging: {{every: 1, metrics: {dir}/metrics.jsonl{trace}}}
comm: {{timeout_s: {timeout}}}
"""


def job(d, world, arch="llama", zero=0, pp=1, tp=1, cp=1, cp_comm="allgather", ep=1, sp=False, schedule="1f1b", vpp=1,
        steps=8, timeout=60, offload="none", trace=None, max_in_flight=0):
    path = os.path.join(d, "job.yaml")
    moe = ", moe: {experts: 4, top_k: 2, capacity_factor: 1.0}" if arch == "mixtral" else ""
    with open(path, "w") as f:
        f.write(JOB.format(arch=arch, moe=moe, zero=zero, pp=pp, tp=tp, cp=cp, cp_comm=cp_comm, ep=ep,
                           sp="true" if sp else "false", offload=offload,
                           schedule=schedule, vpp=vpp, max_in_flight=max_in_flight, steps=steps, world=world,
                           dir=d, timeout=timeout,
                           trace=f", trace: {trace}" if trace else ""))
    return path


def visible_gpus():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """The exit codes and the stderr (all ranks together) of one job, and how long it took."""

    def __init__(self, codes, stderr, seconds):
        self.codes, self.stderr, self.seconds = codes, stderr, seconds


def launch(path, world, extra_env=None, timeout=300):
    """One job over `world` ranks with NCCL: torchrun-style on one GPU (--one-gpu), else the launcher."""
    base = dict(os.environ, NCCL_DEBUG="WARN", **(extra_env or {}))
    for key in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "PTRAIN_LAUNCHED", "PTRAIN_JOB_TOKEN"]:
        base.pop(key, None)
    t0 = time.time()
    if not ONE_GPU:
        r = subprocess.run([PTRAIN, "run", path, "--nproc", str(world)], capture_output=True, text=True,
                           timeout=timeout, env=base)
        return Ranks([r.returncode], r.stderr, time.time() - t0)
    port, token = free_port(), secrets.token_hex(16)
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PTRAIN_JOB_TOKEN=token, CUDA_VISIBLE_DEVICES="0",
                   NCCL_HOSTID=f"ptrain-test-rank-{rank}", NCCL_NET="Socket", NCCL_SOCKET_IFNAME="lo",
                   NCCL_IB_DISABLE="1")
        procs.append(subprocess.Popen([PTRAIN, "run", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=env))
    codes, errs = [], []
    for rank, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=max(1.0, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            _, err = p.communicate()
            err += f"\n(test: rank {rank} outlived {timeout} s and was killed)"
        codes.append(p.returncode)
        errs.append(f"----- rank {rank} -----\n{err}")
    return Ranks(codes, "\n".join(errs), time.time() - t0)


def losses(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [(row["step"], row["loss"]) for row in map(json.loads, f) if "loss" in row]


class NcclTraining(unittest.TestCase):
    def setUp(self):
        needed = 1 if ONE_GPU else 2
        if visible_gpus() < needed:
            self.skipTest(f"needs {needed} GPU(s), nvidia-smi lists {visible_gpus()}")

    def reference(self, d, arch):
        """One rank on GPU 0, same model and batch: the curve every layout must reproduce."""
        path = job(d, 1, arch)
        r = subprocess.run([PTRAIN, "run", path], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
        self.assertEqual(r.returncode, 0, r.stderr)
        return losses(d)

    def assert_nccl_reproduces(self, arch, world, **layout):
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many:
            expected = self.reference(one, arch)
            r = launch(job(many, world, arch, **layout), world)
            self.assertEqual(set(r.codes), {0}, r.stderr)
            self.assertNotIn("collectives go through Gloo", r.stderr)
            got = losses(many)
            self.assertEqual([s for s, _ in got], [s for s, _ in expected])
            for (step, a), (_, b) in zip(expected, got):
                self.assertLess(abs(a - b) / abs(a), TOLERANCE, f"step {step}: one rank {a}, {world} ranks {b}")
            pp, tp = layout.get("pp", 1), layout.get("tp", 1)
            self.assert_device_timed(many, pipelined=pp > 1, reduced=world // (pp * tp) > 1)

    def assert_device_timed(self, d, pipelined, reduced):
        """The step's parts from the device's clock (Comm::settle_device_waits): compute is the compute
        stream's pipeline phase less its waits, each axis's comm_s its waits in that phase (dp: the
        gradient reductions' exposed tail, with ZeRO's dp-cp groups), and with pp the pipeline's idle
        share. Each part is the most over the ranks: one rank's parts fit in its step, so each part does,
        but parts from different ranks may not together. On an otherwise idle GPU their sum stays within
        1.5 steps; two ranks time-sliced on one GPU shared with other jobs (scripts/device_session.sh
        runs its checks side by side) skew apart, and one rank's compute is then the other's wait: an
        H100 measured cp 2's compute 0.64 s and cp wait 0.68 s in a 0.76 s step."""
        with open(os.path.join(d, "metrics.jsonl")) as f:
            rows = [row for row in map(json.loads, f) if "compute_s" in row]
        self.assertTrue(rows)
        for row in rows[1:]:  # the first step pays for warm-up
            comm = row["comm_s"]
            self.assertGreater(row["compute_s"], 0, row)
            self.assertTrue(all(v >= 0 for v in comm.values()), row)
            self.assertLessEqual(row["compute_s"], 1.05 * row["step_s"], row)
            self.assertTrue(all(v <= 1.05 * row["step_s"] for v in comm.values()), row)
            self.assertLessEqual(row["compute_s"] + sum(comm.values()), 2 * row["step_s"], row)
            if reduced:
                self.assertGreater(comm["dp"], 0, row)
            if pipelined:
                self.assertGreater(comm["pp"], 0, row)  # a stage waits for the other's activations
                self.assertGreater(row["pipeline_idle"], 0, row)
                self.assertLess(row["pipeline_idle"], 1, row)

    def test_data_parallel_zero_1_and_3(self):
        for zero in (1, 3):
            with self.subTest(zero=zero):
                self.assert_nccl_reproduces("llama", 2, zero=zero)

    def test_offloaded_optimizer_at_zero_1_and_3(self):
        # the host's AdamW beside the next forward; weights back on the copy stream from pinned
        # buffers, then (ZeRO 1) NCCL's gather of them or (ZeRO 3) the windows' gathers
        for zero in (1, 3):
            with self.subTest(zero=zero):
                self.assert_nccl_reproduces("llama", 2, zero=zero, offload="optimizer")

    def test_tensor_parallel_with_sequence_parallelism(self):
        self.assert_nccl_reproduces("llama", 2, tp=2, sp=True)

    def test_pipeline_1f1b_and_interleaved(self):
        # the last under a cap on its microbatches in flight: the chunks share their slots in one
        # device pool (schedule.max_in_flight)
        for schedule, vpp, cap in (("1f1b", 1, 0), ("interleaved-1f1b", 2, 0), ("interleaved-1f1b", 2, 2)):
            with self.subTest(schedule=schedule, max_in_flight=cap):
                self.assert_nccl_reproduces("llama", 2, pp=2, schedule=schedule, vpp=vpp, max_in_flight=cap)

    def test_context_parallel_allgather_ring_and_all_to_all(self):
        # ring: isend/recv on the cp group's own channels, the attention op's past-the-keys blocks and
        # attention_merge; a2a: NCCL's all-to-all of q, k, v and the output.
        for cp_comm in ("allgather", "ring", "a2a"):
            with self.subTest(cp_comm=cp_comm):
                self.assert_nccl_reproduces("llama", 2, cp=2, cp_comm=cp_comm)

    def test_expert_parallel(self):
        self.assert_nccl_reproduces("mixtral", 2, ep=2)

    def test_the_trace_shows_nccl_and_copy_streams(self):
        # logging.trace under NCCL: besides the compute stream, each rank's NCCL stream (collectives,
        # receives), its pipeline send streams (pp 2) and the offload's copy stream (ZeRO 1 offloaded),
        # each span named and sized like its host span, no longer than the step it ran in.
        cases = {"pp 2": (dict(pp=2), {"device (compute stream)", "device (NCCL stream: collectives, receives)",
                                       "device (pipeline send stream 0)"}),
                 "dp 2 offloaded": (dict(zero=1, offload="optimizer"),
                                    {"device (compute stream)", "device (NCCL stream: collectives, receives)",
                                     "device (offload copy stream)"})}
        for name, (layout, tracks) in cases.items():
            with self.subTest(name), tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "trace.json")
                r = launch(job(d, 2, trace=path, **layout), 2)
                self.assertEqual(set(r.codes), {0}, r.stderr)
                with open(path) as f:
                    events = json.load(f)["traceEvents"]
                for rank in (0, 1):
                    named = {e["tid"]: e["args"]["name"] for e in events
                             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == rank}
                    self.assertTrue(tracks <= set(named.values()), f"rank {rank}: tracks {sorted(named.values())}")
                    by_name = {v: k for k, v in named.items()}
                    comm = [e for e in events if e["ph"] == "X" and e["pid"] == rank
                            and e["tid"] == by_name["device (NCCL stream: collectives, receives)"]]
                    self.assertTrue(comm)
                    self.assertTrue(all(e["cat"] == "collective" and "bytes" in e["args"] for e in comm))
                    longest_step = max(e["dur"] for e in events if e["ph"] == "X" and e["pid"] == rank
                                       and e["cat"] == "step")
                    self.assertTrue(all(0 <= e["dur"] <= longest_step for e in comm))

    def test_a_stalled_rank_ends_the_job_at_the_timeout(self):
        with tempfile.TemporaryDirectory() as d:
            r = launch(job(d, 2, zero=1, steps=1000, timeout=5), 2, {"PTRAIN_DEBUG_FAULT": "1:3:stall"}, timeout=120)
            self.assertNotIn("collectives go through Gloo", r.stderr)
            self.assertIn(1, r.codes, r.stderr)
            self.assertLess(r.seconds, 5 + 15 + 30, r.stderr)  # the timeout, the launcher's grace, start-up
            self.assertIn("last collectives of this rank", r.stderr)
            print(f"    stalled rank: job ended after {r.seconds:.1f} s, exit codes {r.codes}", file=sys.stderr)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--ptrain" in args:
        i = args.index("--ptrain")
        PTRAIN = args[i + 1]
        del args[i:i + 2]
    if "--one-gpu" in args:
        ONE_GPU = True
        args.remove("--one-gpu")
    if not PTRAIN or not shutil.which(PTRAIN):
        sys.exit(f"usage: {sys.argv[0]} --ptrain PATH [--one-gpu] [unittest args]")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.main(sys.modules[__name__], args)
