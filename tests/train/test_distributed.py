"""Multi-process `ptrain run` through the local launcher: data, tensor, context and pipeline parallelism and
ZeRO reproduce the single-rank loss curve (dense and MoE models), distributed checkpoints reshard across layouts, and
faults end the job cleanly (the launcher names the rank, leaves no process behind, exits 1 within
15 s)."""
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PTRAIN = ""
TOLERANCE = 1e-5  # relative, fp32 (layout independence: any layout reproduces one rank)

JOB = """\
name: dist-test
backend: cpu
model: {{arch: {arch}, layers: {layers}, hidden: 32, heads: 4, kv_heads: {kv_heads}, ffn_hidden: 64, vocab: 97, seq_len: 16{moe}}}
parallel: {{zero: {zero}, pp: {pp}, tp: {tp}, cp: {cp}, cp_comm: {cp_comm}, ep: {ep}, sequence_parallel: {sp}, order: {order}, offload: {offload}}}
schedule: {{kind: {schedule}, virtual_stages: {vpp}, layers_per_stage: {layers_per_stage}, max_in_flight: {max_in_flight}}}
train: {{steps: {steps}, global_batch: 8, micro_batch: {micro_batch}, precision: fp32, seed: 5, recompute: {recompute}}}
optimizer: {{lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 4}}
data: {{format: synthetic, eval_every: 10}}
checkpoint: {{dir: {dir}/ckpt, every: {every}, keep: 3}}
cluster: {{nodes: 1, gpus_per_node: {world}, gpu: cpu}}
logging: {{every: 5, metrics: {dir}/metrics.jsonl}}
comm: {{timeout_s: {timeout}}}
"""


def job(d, dp=1, zero=0, steps=20, arch="gpt2", every=10, timeout=60, pp=1, schedule="1f1b", vpp=1, layers=2,
        layers_per_stage="[]", tp=1, sp=False, cp=1, recompute="selective", micro_batch=1, ep=1,
        order="tp-cp-ep-dp-pp", cp_comm="allgather", offload="none", max_in_flight=0):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        # llama and mixtral with grouped-query attention (2 kv heads: replicated at tp 4); gpt2 has 4;
        # mixtral's experts drop some tokens (capacity 8 of a sequence's 32 choices)
        moe = ", moe: {experts: 4, top_k: 2, capacity_factor: 1.0, aux_loss_coef: 0.05}" if arch == "mixtral" else ""
        f.write(JOB.format(world=dp * pp * tp * cp, tp=tp, cp=cp, cp_comm=cp_comm, offload=offload, ep=ep, recompute=recompute, micro_batch=micro_batch, sp="true" if sp else "false", kv_heads=4 if arch == "gpt2" else 2, moe=moe, zero=zero, steps=steps, arch=arch, every=every, timeout=timeout, dir=d, order=order,
                           pp=pp, schedule=schedule, vpp=vpp, layers=layers, layers_per_stage=layers_per_stage,
                           max_in_flight=max_in_flight))
    return path


def env(**extra):
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ["PTRAIN_DEBUG_FAULT", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PTRAIN_LAUNCHED"]:
        e.pop(key, None)
    e.update(extra)
    return e


def run(*args, timeout=300, preexec_fn=None, **extra):
    t0 = time.time()
    r = subprocess.run([PTRAIN, "run", *args], capture_output=True, text=True, timeout=timeout, env=env(**extra),
                       preexec_fn=preexec_fn)
    r.seconds = time.time() - t0
    return r


def communicate_all(procs, timeout):
    """Every process's stderr once all have exited; past `timeout` s all are killed and the test fails
    with what each had printed (a hang here once went unexplained)."""
    deadline = time.time() + timeout
    errors = []
    for p in procs:
        try:
            errors.append(p.communicate(timeout=max(0.1, deadline - time.time()))[1])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            printed = [q.communicate()[1] for q in procs]
            raise AssertionError(f"ranks still running after {timeout} s; their stderr:\n" +
                                 "\n".join(f"--- rank {r} ---\n{e}" for r, e in enumerate(printed)))
    return errors


def limit_file_size():
    """preexec_fn: files may not grow past 32 KiB (write() fails with EFBIG instead of a signal), so
    a rank's checkpoint shard fails as on a full disk while the small files are written."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, 32 << 10))


def metrics(d, name="metrics.jsonl"):
    with open(os.path.join(d, name)) as f:
        return [json.loads(line) for line in f]


def curve(rows):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows]


def workers_of(launcher_pid):
    """Live worker pids of a launcher, by rank."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                variables = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            out[int(variables[b"RANK"])] = int(pid)
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


def store_port_once_training(launcher, d):
    """The store port of the job that `launcher` (a Popen) runs in `d`, once it has started training."""
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(d, "metrics.jsonl")):
        time.sleep(0.05)
    with open(f"/proc/{workers_of(launcher.pid)[0]}/environ", "rb") as f:
        variables = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
    return int(variables[b"MASTER_PORT"])


def children_of(pid):
    """Pids of the children of `pid` (their own main threads' children file when the kernel has it)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        pass
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return out


def blocks_sigterm(pid):
    """Whether the main thread of `pid` blocks SIGTERM (ptrain run does from its start)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)) != 0
    except OSError:
        pass
    return False


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def assert_resumes(test, saved, make_job, want):
    """The checkpoints and metrics in `saved`, copied to a fresh directory, resume the job that
    make_job(directory) writes there to the end of the curve `want` (steps 1..20)."""
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(os.path.join(saved, "ckpt"), os.path.join(d, "ckpt"))
        shutil.copy(os.path.join(saved, "metrics.jsonl"), os.path.join(d, "metrics.jsonl"))
        r = run(make_job(d))
        test.assertEqual(r.returncode, 0, r.stderr)
        test.assertIn("resumed from", r.stderr)
        got = curve(metrics(d))
        test.assertEqual([s for s, _, _ in got], list(range(1, 21)))
        steps = [row["step"] for row in metrics(d)]
        test.assertEqual(len(steps), len(set(steps)), "a row per step")
        for (step, loss, _), (_, loss0, _) in zip(got, want):
            test.assertLess(abs(loss - loss0) / abs(loss0), TOLERANCE, f"step {step}")


class Timed(unittest.TestCase):
    def setUp(self):
        self.t0 = time.time()

    def tearDown(self):
        print(f"  [{self.id().split('.')[-1]}: {time.time() - self.t0:.1f} s]", file=sys.stderr)


class LayoutIndependence(Timed):
    reference = {}

    @classmethod
    def reference_curve(cls, arch):
        if arch not in cls.reference:
            with tempfile.TemporaryDirectory() as d:
                r = run(job(d, dp=1, zero=0, arch=arch))
                assert r.returncode == 0, r.stderr
                cls.reference[arch] = curve(metrics(d))
        return cls.reference[arch]

    def check_layout(self, dp, zero, arch="gpt2"):
        want = self.reference_curve(arch)
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=dp, zero=zero, arch=arch))
            self.assertEqual(r.returncode, 0, r.stderr)
            if dp > 1:  # rank 0's step line, as it wrote it: the launcher adds no prefix
                self.assertRegex(r.stdout, r"(?m)^step +\d+/")
            got = curve(metrics(d))
            print(f"    {arch} dp {dp} zero {zero}: {r.seconds:.2f} s", file=sys.stderr)
        self.assertEqual([s for s, _, _ in got], list(range(1, 21)))
        for (step, loss, norm), (_, loss0, norm0) in zip(got, want):
            self.assertLess(abs(loss - loss0) / abs(loss0), TOLERANCE, f"loss at step {step}")
            self.assertLess(abs(norm - norm0) / abs(norm0), TOLERANCE, f"grad norm at step {step}")

    def test_dp_by_zero_matrix_reproduces_one_rank(self):
        for dp in [1, 2, 4]:
            for zero in [0, 1, 2, 3]:
                with self.subTest(dp=dp, zero=zero):
                    self.check_layout(dp, zero)

    def test_llama_with_zero(self):
        for zero in [1, 3]:
            with self.subTest(zero=zero):
                self.check_layout(2, zero, arch="llama")


class ModelParallelCurves(Timed):
    """Model-parallel layouts of a 4-layer model against its single-rank run: the loss and validation
    curves of one rank, and the gradient norms of the data-parallel run with the same dp (whose
    reductions add in the same order: over 20 steps at this learning rate dp = 2 alone moves the
    norm by 5e-5 relative, while the loss stays within 1e-5)."""
    reference = {}

    def reference_rows(self, arch, dp=1):
        if (arch, dp) not in self.reference:
            with tempfile.TemporaryDirectory() as d:
                r = run(job(d, arch=arch, layers=4, dp=dp))
                assert r.returncode == 0, r.stderr
                self.reference[arch, dp] = metrics(d)
        return self.reference[arch, dp]

    def reference_curve(self, arch, dp=1):
        return curve(self.reference_rows(arch, dp))

    def check_resumes(self, arch, saved, layouts):
        """A checkpoint that layout `saved` writes at step 10 resumes in each of `layouts` onto the
        one-rank curve."""
        want = self.reference_curve(arch)
        with tempfile.TemporaryDirectory() as a:
            r = run(job(a, arch=arch, layers=4, **saved), "--stop-after-steps", "10")
            self.assertEqual(r.returncode, 0, r.stderr)
            for layout in layouts:
                with self.subTest(**layout):
                    assert_resumes(self, a, lambda b: job(b, arch=arch, layers=4, **layout), want)

    def check_layouts(self, arch, layouts, norm_tolerance=TOLERANCE):
        for layout in layouts:
            one_rank, same_dp = self.reference_curve(arch), self.reference_curve(arch, layout.get("dp", 1))
            with self.subTest(**layout), tempfile.TemporaryDirectory() as d:
                r = run(job(d, arch=arch, layers=4, **layout))
                self.assertEqual(r.returncode, 0, r.stderr)
                rows = metrics(d)
                got = curve(rows)
                print(f"    {arch} {layout}: {r.seconds:.2f} s", file=sys.stderr)
                self.assertEqual([s for s, _, _ in got], list(range(1, 21)))
                # Validation runs forward only, through every stage (and chunk) in turn.
                evaluated = [(row["step"], row["val_loss"]) for row in rows if "val_loss" in row]
                want = [(row["step"], row["val_loss"]) for row in self.reference_rows(arch) if "val_loss" in row]
                self.assertEqual([s for s, _ in evaluated], [10, 20])
                for (step, v), (_, v0) in zip(evaluated, want):
                    self.assertLess(abs(v - v0) / abs(v0), TOLERANCE, f"validation loss at step {step}")
                # What the step's collectives and messages sent per axis is what validate predicts.
                predicted = json.loads(subprocess.run([PTRAIN, "validate", os.path.join(d, "job.yaml"), "--json"],
                                                      capture_output=True, text=True).stdout)["comm_bytes_per_step"]
                # Every step sends the same (the first misses the previous update's ZeRO gathers;
                # evaluations at steps 10 and 20 count in no step). Not under ZeRO-3, whose gathers
                # depend on what its windows hold, which an evaluation changes.
                for row in rows[1:] if layout.get("zero", 0) < 3 else []:
                    self.assertEqual(row["comm_bytes"], rows[-1]["comm_bytes"], f"step {row['step']}")
                for axis in ["tp", "pp", "cp", "dp", "ep"]:
                    measured = rows[-1]["comm_bytes"][axis]
                    self.assertAlmostEqual(measured, predicted[axis], delta=1e-3 * predicted[axis] + 1,
                                           msg=f"{axis} bytes per step")
                    # The time inside those calls: some where bytes moved, never more than the time
                    # between two reports (the previous step's tail, its ZeRO gathers after the update
                    # included, and this step up to its report: within the two steps).
                    spent = rows[-1]["comm_s"][axis]
                    self.assertTrue(spent > 0 if measured > 0 else spent >= 0, f"{axis} seconds {spent}")
                    self.assertLessEqual(spent, rows[-2]["step_s"] + rows[-1]["step_s"],
                                         f"{axis} seconds within the interval between reports")
                self.assertLess(rows[-1]["optimizer_s"], rows[-1]["step_s"])
                for (step, loss, norm), (_, loss1, _), (_, loss0, norm0) in zip(got, one_rank, same_dp):
                    self.assertLess(abs(loss - loss1) / abs(loss1), TOLERANCE, f"loss at step {step} (one rank)")
                    self.assertLess(abs(loss - loss0) / abs(loss0), TOLERANCE, f"loss at step {step}")
                    self.assertLess(abs(norm - norm0) / abs(norm0), norm_tolerance, f"grad norm at step {step}")



class PipelineLayouts(ModelParallelCurves):
    """Pipeline stages, with data parallelism, ZeRO, interleaving and uneven splits."""

    def test_gpt2_tied_head_across_stages(self):
        # The word embedding lives on the first and the last stage; their gradients are summed.
        self.check_layouts("gpt2", [
            dict(pp=2),
            dict(pp=2, dp=2, zero=1),
            dict(pp=4, schedule="gpipe", zero=0),
            dict(pp=2, dp=2, zero=1, schedule="interleaved-1f1b", vpp=2),
            dict(pp=2, dp=2, zero=1, schedule="zb-h1"),
        ])

    def test_llama_with_zero_and_uneven_stages(self):
        self.check_layouts("llama", [
            dict(pp=2, dp=2, zero=3, schedule="interleaved-1f1b", vpp=2),
            dict(pp=2, zero=2, layers_per_stage="[1, 3]"),
            dict(pp=4, dp=2, zero=1),
            dict(pp=4, schedule="zb-h1"),
            # Llama 3's rank order (pp before dp): a pipeline's stages are neighbouring ranks
            dict(pp=2, dp=2, zero=1, order="tp-cp-ep-pp-dp"),
        ])

    def test_a_cap_on_microbatches_in_flight(self):
        # schedule.max_in_flight reorders 1f1b and interleaved-1f1b under the cap and lets a rank's
        # chunks share their activation slots (with tensor, context and expert parallelism too):
        # the curve stays the one-rank curve.
        layouts = {"llama": [
            dict(pp=2, schedule="interleaved-1f1b", vpp=2, max_in_flight=2),
            dict(pp=2, dp=2, zero=1, schedule="interleaved-1f1b", vpp=2, max_in_flight=2),
            dict(pp=4, max_in_flight=1),
            dict(pp=2, layers_per_stage="[1, 3]", max_in_flight=1, recompute="full"),
            dict(tp=2, sp=True, pp=2, schedule="interleaved-1f1b", vpp=2, max_in_flight=2),
            dict(cp=2, pp=2, schedule="interleaved-1f1b", vpp=2, max_in_flight=2, micro_batch=2),
        ], "mixtral": [
            dict(dp=2, ep=2, pp=2, schedule="interleaved-1f1b", vpp=2, max_in_flight=2, recompute="none"),
        ]}
        for arch, caps in layouts.items():
            for layout in caps:  # each cap binds: validate says the schedule was ordered under it
                with tempfile.TemporaryDirectory() as d:
                    v = subprocess.run([PTRAIN, "validate", job(d, arch=arch, layers=4, **layout), "--json"],
                                       capture_output=True, text=True)
                    self.assertEqual(v.returncode, 0, v.stderr)
                    self.assertEqual(json.loads(v.stdout)["pipeline"]["max_in_flight"], layout["max_in_flight"])
            self.check_layouts(arch, caps)

    def test_v_shaped_schedules(self):
        # zbv and dualpipev: two chunks per rank in a V; rank 0 holds the first and the last stage,
        # rank 1 (the last) hands its chunk 0's output to its chunk 1 without a message.
        self.check_layouts("llama", [
            dict(pp=2, schedule="zbv", vpp=2),
            dict(pp=2, dp=2, zero=1, schedule="zbv", vpp=2),
            dict(pp=2, schedule="dualpipev", vpp=2, recompute="full"),
            dict(pp=2, dp=2, zero=1, schedule="dualpipev", vpp=2),
        ])
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, layers=4, pp=2, schedule="zbv", vpp=2))  # gpt2 ties its word embedding
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("schedule.kind: schedule.kind zbv puts the first and the last stage on pipeline rank 0",
                          r.stderr)

    def test_a_pipeline_checkpoint_resumes_in_other_layouts(self):
        self.check_resumes("gpt2", dict(pp=2, dp=2, zero=1), [dict(), dict(pp=4, schedule="gpipe")])

    def test_zero_stages_that_reduce_too_early_are_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, layers=4, pp=2, zero=2, schedule="zb-h1"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("parallel.zero: zero 2 with schedule.kind zb-h1", r.stderr)
            r = run(job(d, layers=4, pp=2, zero=3))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("parallel.zero: zero 3 with pp = 2 and a tied word embedding", r.stderr)


class TensorParallelLayouts(ModelParallelCurves):
    """Tensor parallelism (Megatron: column/row-parallel layers, vocab-parallel embedding and loss,
    sequence parallelism), alone and with data, pipeline and ZeRO parallelism. Splitting the row-parallel GEMMs' inner sums
    and the softmax's sum over the vocabulary rounds differently, like dp's reduction: the norms
    agree to 1e-7 over the first steps, the losses to 1e-6 over all 20, and gpt2's norm spikes
    (2.6 at step 5) amplify the norms' differences to 2e-5 at tp 2."""
    NORM_TOLERANCE = 1e-4

    def test_gpt2_vocab_parallel_embedding_and_tied_head(self):
        # vocab 97 pads to 98 at tp 2; the tied head shares the embedding's shard.
        self.check_layouts("gpt2", [
            dict(tp=2),
            dict(tp=2, dp=2, zero=3),
            dict(tp=2, pp=2, schedule="zb-h1"),
            dict(tp=2, pp=2, sp=True, schedule="zb-h1"),
        ], self.NORM_TOLERANCE)

    def test_llama_shared_kv_heads_and_pipelines(self):
        # 2 kv heads: tp 4 replicates each on 2 ranks, whose k/v gradients are summed.
        self.check_layouts("llama", [
            dict(tp=4),
            dict(tp=2, dp=2, zero=2),
            dict(tp=2, pp=2, schedule="interleaved-1f1b", vpp=2),
            dict(tp=4, sp=True),
            dict(tp=2, dp=2, sp=True, zero=3),
        ], self.NORM_TOLERANCE)

    def test_a_tensor_parallel_checkpoint_resumes_in_other_layouts(self):
        self.check_resumes("llama", dict(tp=2, dp=2, zero=1), [dict(), dict(tp=4, sp=True), dict(tp=2, pp=2)])


class ContextParallelLayouts(ModelParallelCurves):
    """Context parallelism: each rank holds two chunks of every sequence (the causally balanced
    split), attention gathers the sequence's keys and values over cp and sums their gradients back;
    alone and with tensor (with and without SP), pipeline (zb-h1, interleaved) and data parallelism,
    ZeRO, recompute none, selective and full, two sequences per microbatch. The losses agree to 1e-6;
    gpt2's norm spike at step 5 takes its norms to 2e-5, as under tp."""

    def test_gpt2_learned_positions_per_chunk(self):
        self.check_layouts("gpt2", [
            dict(cp=2),
            dict(cp=2, tp=2, sp=True),
            dict(cp=2, pp=2, schedule="zb-h1", recompute="full"),
            dict(cp=2, tp=2, micro_batch=2, recompute="none"),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_llama_rotary_positions_per_chunk(self):
        self.check_layouts("llama", [
            dict(cp=4),
            dict(cp=2, dp=2, zero=3),
            dict(cp=2, recompute="full"),
            dict(cp=2, pp=2, schedule="interleaved-1f1b", vpp=2, micro_batch=2),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_a_context_parallel_checkpoint_resumes_in_other_layouts(self):
        self.check_resumes("llama", dict(cp=2, dp=2, zero=1), [dict(), dict(cp=4, cp_comm="ring")])

    def test_ring_attention(self):
        # k and v pass around the ring, blocks folded by their log-sum-exps; their gradients travel
        # with them (cp 4: three hops, full blocks and diagonals on every rank).
        self.check_layouts("llama", [
            dict(cp=2, cp_comm="ring"),
            dict(cp=4, cp_comm="ring", recompute="none"),
            dict(cp=2, cp_comm="ring", tp=2, sp=True, micro_batch=2),
            dict(cp=2, cp_comm="ring", pp=2, schedule="zb-h1", recompute="full"),
        ], TensorParallelLayouts.NORM_TOLERANCE)
        self.check_layouts("gpt2", [dict(cp=2, cp_comm="ring", dp=2, zero=3)], TensorParallelLayouts.NORM_TOLERANCE)

    def test_all_to_all_attention(self):
        # Heads split over cp: llama's 2 kv heads split at cp 2, are copied to two ranks each at
        # cp 4 and under tp 2 (one kv head per tp rank), their copies' gradients summed.
        self.check_layouts("llama", [
            dict(cp=2, cp_comm="a2a"),
            dict(cp=4, cp_comm="a2a", recompute="full"),
            dict(cp=2, cp_comm="a2a", tp=2, sp=True),
            dict(cp=2, cp_comm="a2a", pp=2, schedule="interleaved-1f1b", vpp=2, micro_batch=2),
        ], TensorParallelLayouts.NORM_TOLERANCE)
        self.check_layouts("gpt2", [dict(cp=2, cp_comm="a2a", dp=2, zero=1, recompute="none")],
                           TensorParallelLayouts.NORM_TOLERANCE)


class OptimizerOffload(ModelParallelCurves):
    """parallel.offload: optimizer (ZeRO-Offload): the master weights and AdamW's moments on the host,
    the owned gradients copied out, a host thread updating unit after unit while the next forward
    copies each back as it reaches it; the curve is the device-resident one's, at ZeRO 0-3, with
    tensor and pipeline parallelism."""

    def test_offloaded_optimizer_reproduces_the_curve(self):
        self.check_layouts("llama", [
            dict(dp=2, zero=0, offload="optimizer"),
            dict(dp=2, zero=1, offload="optimizer"),
            dict(dp=2, zero=2, tp=2, offload="optimizer"),
            dict(dp=2, zero=3, offload="optimizer"),
            dict(dp=2, zero=3, pp=2, offload="optimizer"),
            dict(dp=2, zero=1, pp=2, offload="optimizer"),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_an_offloaded_checkpoint_resumes_on_the_device_and_back(self):
        self.check_resumes("llama", dict(dp=2, zero=1, offload="optimizer"),
                           [dict(), dict(dp=2, zero=3, offload="optimizer")])


class MoeLayouts(ModelParallelCurves):
    """Mixtral's MoE layers (each expert takes a capacity of every sequence's tokens, the rest are
    dropped; a load-balancing loss) under data, expert and pipeline parallelism, ZeRO, every recompute
    mode and two sequences per microbatch: routing is per sequence, so every layout drops the same
    tokens. Under expert parallelism each rank holds experts/ep experts, exchanges its tokens' slots
    with its ep group (all-to-all) and reduces its experts' gradients over the expert-dp group."""

    def test_mixtral_data_and_pipeline_parallel(self):
        self.check_layouts("mixtral", [
            dict(dp=2, zero=1),
            dict(dp=2, zero=3, recompute="full", micro_batch=2),
            dict(pp=2, schedule="zb-h1", recompute="none"),
            dict(pp=2, dp=2, zero=2, schedule="interleaved-1f1b", vpp=2),
        ])

    def test_mixtral_expert_parallel(self):
        self.check_layouts("mixtral", [
            dict(dp=2, ep=2, zero=1),
            dict(dp=4, ep=2, zero=2, micro_batch=2),
            dict(dp=4, ep=4, zero=0, recompute="none"),
            dict(dp=2, ep=2, pp=2, schedule="zb-h1", recompute="full"),
            dict(dp=4, ep=2, zero=3, recompute="full"),
        ])

    def test_mixtral_experts_split_over_the_tp_group(self):
        # ep = tp under sequence parallelism: every tp rank routes the group's gathered tokens and
        # runs its experts on them; the outputs are reduce-scattered like a row-parallel layer's.
        self.check_layouts("mixtral", [
            dict(tp=2, sp=True, ep=2),
            dict(tp=2, sp=True, ep=2, dp=2, zero=2, recompute="none"),
            dict(tp=2, sp=True, ep=2, pp=2, schedule="zb-h1", recompute="full"),
            dict(tp=2, sp=True, ep=2, dp=2, zero=3, micro_batch=2),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_mixtral_with_experts_apart_from_the_tp_group(self):
        # tp 2 with every expert on each tp rank (ep 1), the experts over the tp x dp ranks (ep 4), or
        # ep = tp = 2 in an order that puts the ep groups across dp (ranks 0 and 2), not on the tp
        # pairs: each tp rank routes the group's tokens alike and dispatches its own, the others' rows
        # of its output zero in the tp sum; the experts' gradients are summed over tp x dp / ep.
        self.check_layouts("mixtral", [
            dict(tp=2, sp=True),
            dict(tp=2, sp=True, dp=2, ep=4, zero=1),
            dict(tp=2, sp=True, dp=2, ep=2, order="tp-cp-dp-ep-pp"),
            dict(tp=2, sp=True, dp=2, zero=3, recompute="full"),
            dict(tp=2, sp=True, cp=2, pp=2, schedule="zb-h1", micro_batch=2),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_mixtral_under_context_parallelism(self):
        # Each cp rank holds two chunks of every sequence; the router's logits are gathered and the
        # whole sequences routed alike on every cp rank (the same tokens dropped as on one rank),
        # the load-balancing loss from the whole sequence's counts. With experts over the cp pair
        # (ep 2 in order tp-cp-ep-dp-pp), with dp, pp, every ring and all-to-all attention.
        self.check_layouts("mixtral", [
            dict(cp=2),
            dict(cp=2, ep=2, recompute="full"),
            dict(cp=2, dp=2, ep=4, zero=1, cp_comm="ring"),
            dict(cp=2, pp=2, schedule="zb-h1", cp_comm="a2a", micro_batch=2),
            dict(cp=2, tp=2, sp=True, ep=2, recompute="none"),
        ], TensorParallelLayouts.NORM_TOLERANCE)

    def test_a_mixtral_checkpoint_resumes_in_other_layouts(self):
        self.check_resumes("mixtral", dict(dp=2, zero=2), [dict(), dict(pp=2, dp=2, zero=1)])
        self.check_resumes("mixtral", dict(dp=4, ep=2, zero=1), [dict(), dict(dp=2, ep=2, zero=2)])
        # Experts sharded over the tp ranks (ZeRO over the expert-dp group at ep 1, or ep = tp): each
        # tp rank writes its own chunk of them (tp rank 1's were once dropped as tp copies).
        self.check_resumes("mixtral", dict(tp=2, sp=True, zero=1), [dict(), dict(tp=2, sp=True, ep=2)])
        self.check_resumes("mixtral", dict(tp=2, sp=True, ep=2), [dict(dp=2, zero=1)])


class DistributedCheckpoints(Timed):
    def test_save_at_dp4_zero3_resume_at_dp2_zero1_and_dp1(self):
        with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as a:
            self.assertEqual(run(job(ref, dp=1, zero=0)).returncode, 0)
            want = curve(metrics(ref))
            r = run(job(a, dp=4, zero=3), "--stop-after-steps", "10")
            self.assertEqual(r.returncode, 0, r.stderr)
            step_dir = os.path.join(a, "ckpt", "step_10")
            with open(os.path.join(step_dir, "manifest.json")) as f:
                self.assertEqual(len(json.load(f)["files"]), 4)  # every rank wrote its shards
            for target_dp, target_zero in [(2, 1), (1, 0)]:
                with self.subTest(dp=target_dp, zero=target_zero):
                    assert_resumes(self, a, lambda b: job(b, dp=target_dp, zero=target_zero), want)

    def test_a_resume_with_another_global_batch_goes_on_from_the_consumed_samples(self):
        # 4 steps of 8 samples took positions 0..31 of the data order; resumed at 16 a step, step 5
        # takes 32..47 on every layout. A resume at 8 a step with a learning rate of 1e-30 (the weights
        # stay those of step 4) takes the same samples as its steps 5 and 6: step 5's loss at 16 is the
        # mean of their two losses (each the mean over as many tokens).
        def resume(saved, d, *flags, dp=1):
            shutil.copytree(os.path.join(saved, "ckpt"), os.path.join(d, "ckpt"))
            r = run(job(d, dp=dp, zero=1 if dp > 1 else 0, steps=6), *flags)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("resumed from", r.stderr)
            return {row["step"]: row["loss"] for row in metrics(d)}

        def consumed(d, step):
            with open(os.path.join(d, "ckpt", f"step_{step}", "manifest.json")) as f:
                return json.load(f)["state"]["consumed_samples"]

        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as frozen:
            r = run(job(a, steps=6), "--stop-after-steps", "4")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(consumed(a, 4), 32)
            halves = resume(a, frozen, "--set", "optimizer.lr=1e-30", "--set", "optimizer.min_lr=0")
            want = (halves[5] + halves[6]) / 2
            for dp in (1, 2):
                with self.subTest(dp=dp), tempfile.TemporaryDirectory() as b, tempfile.TemporaryDirectory() as c:
                    losses = resume(a, b, "--set", "train.global_batch=16", "--set", "train.steps=5", dp=dp)
                    self.assertLess(abs(losses[5] - want) / want, TOLERANCE)
                    self.assertEqual(consumed(b, 5), 48)
                    # ... and back to 8 a step: step 6 takes 48..55.
                    shutil.copytree(os.path.join(b, "ckpt"), os.path.join(c, "ckpt"))
                    self.assertEqual(run(job(c, dp=dp, steps=6)).returncode, 0)
                    self.assertEqual(consumed(c, 6), 56)

    def test_a_failed_step_leaves_the_previous_checkpoint_current(self):
        with tempfile.TemporaryDirectory() as d:
            # step 5 saved in the foreground: a background save commits once every rank has written
            # it, which on a loaded machine may come after the kill
            r = run(job(d, dp=2, zero=2, every=5), "--set", "checkpoint.async=false", PTRAIN_DEBUG_FAULT="1:8:kill")
            self.assertEqual(r.returncode, 1, r.stderr)
            with open(os.path.join(d, "ckpt", "latest")) as f:
                self.assertEqual(f.read().strip(), "step_5")
            r = run(job(d, dp=2, zero=2, every=5))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("at step 5", r.stderr)
            # steps 6 and 7 ran twice; the metrics keep the second run's
            self.assertEqual([row["step"] for row in metrics(d)], list(range(1, 21)))

    def test_a_save_that_fails_on_every_rank_leaves_no_temp_directory(self):
        # Files may not grow past 32 KiB in the second run (the launcher and its workers): every
        # rank's shard of step 10 fails like on a full disk.
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(run(job(d, dp=2, zero=1, steps=5, every=5)).returncode, 0)
            r = run(job(d, dp=2, zero=1, steps=10, every=5), preexec_fn=limit_file_size)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("File too large", r.stderr)
            # Rank 0 removed the temporary directory only once every rank was done with it.
            self.assertNotIn("No such file or directory", r.stderr)
            ckpt = os.path.join(d, "ckpt")
            self.assertEqual([n for n in os.listdir(ckpt) if ".tmp-" in n], [])
            self.assertFalse(os.path.exists(os.path.join(ckpt, "step_10")))
            with open(os.path.join(ckpt, "latest")) as f:
                self.assertEqual(f.read(), "step_5\n")

    def test_a_save_that_fails_on_one_rank_fails_on_every_rank(self):
        # Two torchrun-style ranks started by hand, only rank 1 with the file size limit: rank 0
        # writes its shard, but the step is abandoned and both ranks say why.
        with tempfile.TemporaryDirectory() as d, socket.socket() as s:
            self.assertEqual(run(job(d, dp=2, zero=1, steps=5, every=5)).returncode, 0)
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
            s.close()
            # The job file written once, before either rank starts: writing it again per rank truncated
            # it under rank 0, which once read it empty (fresh-clone CI, 2026-11-27).
            spec = job(d, dp=2, zero=1, steps=10, every=5)
            ranks = [subprocess.Popen([PTRAIN, "run", spec], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, preexec_fn=limit_file_size if rank else None,
                                      env=env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                              PTRAIN_JOB_TOKEN="one-rank-fails"))
                     for rank in range(2)]
            errors = communicate_all(ranks, timeout=60)
            self.assertEqual([p.returncode for p in ranks], [1, 1], errors)
            self.assertIn("checkpoint step 10 not saved: rank 1: ", errors[0])
            self.assertIn("rank_1.safetensors: write failed: File too large", errors[0])
            self.assertIn("rank_1.safetensors: write failed: File too large", errors[1])
            ckpt = os.path.join(d, "ckpt")
            self.assertEqual(sorted(os.listdir(ckpt)), ["job.lock", "latest", "step_5"])

    def test_a_rank_that_refuses_its_job_says_why_and_rank_0_names_it(self):
        # torchrun-style ranks each load the job alone: rank 1 refuses a bad --set on its own output,
        # and its rank 0, started without it, names the rank that never joined.
        with tempfile.TemporaryDirectory() as d, socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
            s.close()
            spec = job(d, dp=2, zero=1, steps=2, timeout=3)
            launch = dict(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, PTRAIN_JOB_TOKEN="one-rank-refuses")
            r = run(spec, "--set", "train.global_batch=7", RANK="1", **launch)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("error: rank 1: --set train.global_batch=7: train.global_batch: ", r.stderr)
            r = run(spec, RANK="0", **launch)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("rank 1 did not join the job within comm.timeout_s (3 s)", r.stderr)

    def test_a_store_host_unknown_here_is_exit_2_on_every_rank_at_once(self):
        # .invalid never resolves (RFC 6761). Rank 0 refused it at once; the other ranks retried the
        # name until comm.timeout_s (600 s by default), then exited 1.
        with tempfile.TemporaryDirectory() as d:
            spec = job(d, dp=2, zero=1, steps=2)
            launch = dict(WORLD_SIZE="2", MASTER_ADDR="no-such-host.invalid", MASTER_PORT="29500",
                          PTRAIN_JOB_TOKEN="unknown-host")
            for rank in ("0", "1"):
                r = run(spec, RANK=rank, timeout=60, **launch)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("no-such-host.invalid", r.stderr)
                self.assertLess(r.seconds, 30)

    def test_a_second_job_on_a_locked_directory_is_refused_by_every_rank(self):
        with tempfile.TemporaryDirectory() as d:
            log = open(os.path.join(d, "first.log"), "w")
            first = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=100000)], stdout=log, stderr=log,
                                     env=env())
            try:
                deadline = time.time() + 60
                while time.time() < deadline and not os.path.exists(os.path.join(d, "metrics.jsonl")):
                    time.sleep(0.05)
                holder = workers_of(first.pid)[0]
                r = run(job(d, dp=2, zero=1, steps=100000), "--stop-after-steps", "1", timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertLess(r.seconds, 15)
                self.assertIn(os.path.join(d, "ckpt", "job.lock"), r.stderr)
                self.assertIn(f"pid {holder}", r.stderr)
                self.assertNotIn("resumed from", r.stderr)
                self.assertIsNone(first.poll(), "the first job was disturbed")
                first.send_signal(signal.SIGTERM)
                self.assertEqual(first.wait(timeout=60), 0)
            finally:
                if first.poll() is None:
                    first.kill()
                    first.wait()
                log.close()


class Faults(Timed):
    def assert_clean_failure(self, r, rank, what):
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertLess(r.seconds, 15 + 5)  # 15 s after the fault; the job itself starts in ~1 s
        self.assertRegex(r.stderr, rf"error: rank {rank} \(host [^,]+, pid \d+\) {what}")

    def test_worker_killed_by_signal(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=2, zero=1, steps=1000), PTRAIN_DEBUG_FAULT="1:3:kill")
            self.assert_clean_failure(r, 1, r"was killed by signal 9 \(SIGKILL\)")
            self.assertIn("last output of rank 1", r.stderr)

    def test_worker_exits_non_zero(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=4, zero=0, steps=1000), PTRAIN_DEBUG_FAULT="2:2:exit")
            self.assert_clean_failure(r, 2, "exited with code 3")

    def test_output_whose_reader_is_gone_is_dropped_and_the_job_goes_on(self):
        # `ptrain run ... | head -1`: the launcher's writes to the closed pipe once raised SIGPIPE,
        # which ended it (exit 141) and the job with it, its checkpoint never saved.
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=400, every=0)], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env=env())
            self.assertTrue(p.stdout.readline())
            p.stdout.close()  # the reader goes
            self.assertEqual(p.wait(timeout=120), 0)
            self.assertTrue(os.path.isdir(os.path.join(d, "ckpt", "step_400")))

    def test_a_reader_that_stalls_stalls_no_rank(self):
        # `ptrain run ... | less`, not read for a while: the launcher blocked writing, the workers then
        # blocked in their next print, and the job died of its own collective timeout (exit 1). Now
        # the launcher queues its output and the job trains on; the reader gets every line later.
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=4000, every=0, timeout=3),
                                  "--set", "logging.every=1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env=env())
            deadline = time.time() + 60
            while time.time() < deadline and len(metrics(d) if os.path.exists(os.path.join(d, "metrics.jsonl"))
                                                 else []) < 4000:
                time.sleep(0.2)  # the output is not read meanwhile
            out = p.stdout.read().decode()
            self.assertEqual(p.wait(timeout=60), 0, out[-3000:])
            self.assertIn("step   4000/4000", out)
            self.assertEqual(len(metrics(d)), 4000)

    def test_real_kill_9_of_a_worker(self):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.time()
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=100000)], stderr=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True, env=env())
            deadline = time.time() + 60
            while time.time() < deadline and not os.path.exists(os.path.join(d, "metrics.jsonl")):
                time.sleep(0.1)
            workers = workers_of(p.pid)
            self.assertEqual(sorted(workers), [0, 1])
            killed = time.time()
            os.kill(workers[1], signal.SIGKILL)
            _, err = p.communicate(timeout=30)
            self.assertLess(time.time() - killed, 15)
            self.assertEqual(p.returncode, 1, err)
            self.assertRegex(err, r"error: rank 1 \(host [^,]+, pid \d+\) was killed by signal 9")
            self.assertFalse(any(alive(pid) for pid in workers.values()), "a worker outlived the launcher")
            print(f"    kill -9 to exit: {time.time() - killed:.2f} s (run {killed - t0:.1f} s)", file=sys.stderr)

    def test_hung_collective_ends_at_the_timeout_with_the_logs(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=2, zero=1, steps=1000, timeout=3), PTRAIN_DEBUG_FAULT="1:3:stall")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertLess(r.seconds, 3 + 15 + 5)
            # Rank 0 timed out inside a collective, naming first the rank that never entered it (by
            # its heartbeat: alive, elsewhere), then the collective, with its log; rank 1 (stalled
            # outside any collective) logged its own when told to stop: in its log file, as the
            # terminal shows one failure once (the launcher says rank 1 repeated it).
            self.assertRegex(r.stderr, r"\[rank 0/2 [^\]]*\] \w+ error: rank 1 never entered \w+ call \d+ on \S+ "
                                       r"\(alive, but elsewhere\); rank 0: \w+ #\d+ on group \S+ \(\d+ bytes\) failed")
            self.assertIn("IN FLIGHT", r.stderr)
            self.assertIn("error above was repeated by rank 1", r.stderr)
            with open(os.path.join(d, "logs", "rank_1.log")) as f:
                self.assertRegex(f.read(), r"\[rank 1/2 [^\]]*\] comm error: rank 1 stops \(this rank was in no "
                                           r"collective: the others' timeout may have waited on it\): rank 0:")
            self.assertIn("error: rank 0 (host", r.stderr)

    def test_a_rank_stopped_by_a_signal_is_named_when_it_does_not_stop(self):
        with tempfile.TemporaryDirectory() as d:
            launcher = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=100000, timeout=3)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
            deadline = time.time() + 60
            while time.time() < deadline and not os.path.exists(os.path.join(d, "metrics.jsonl")):
                time.sleep(0.05)
            stopped = workers_of(launcher.pid)[1]
            os.kill(stopped, signal.SIGSTOP)
            _, err = launcher.communicate(timeout=60)
            self.assertEqual(launcher.returncode, 1, err)
            # Named twice: by rank 0 from its heartbeats, first; by the launcher, which finds it stopped
            # and kills it at once (a stopped process cannot act on SIGTERM).
            self.assertRegex(err, r"comm error: rank 1 stopped beating")
            self.assertRegex(err, rf"launch error: rank 1 \(pid {stopped}\) is stopped \(SIGSTOP, SIGTSTP or a debugger\)")

    def test_a_pipeline_stage_that_dies_or_hangs_ends_the_job(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, layers=4, pp=2, steps=1000), PTRAIN_DEBUG_FAULT="1:3:kill")
            self.assert_clean_failure(r, 1, r"was killed by signal 9 \(SIGKILL\)")
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, layers=4, pp=4, steps=1000, timeout=3), PTRAIN_DEBUG_FAULT="2:3:stall")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertLess(r.seconds, 3 + 15 + 5)
            self.assertRegex(r.stderr, r"\[rank [013]/4 [^\]]*\] \w+ error: rank 2 never entered \w+ call \d+ on pp\S+ "
                                       r"\(alive, but elsewhere\); rank [013]: \w+ #\d+ on group pp\S+ \(\d+ bytes\) failed")

    def test_sigterm_checkpoints_every_rank_and_resume_continues_exactly(self):
        with tempfile.TemporaryDirectory() as ref, tempfile.TemporaryDirectory() as d:
            self.assertEqual(run(job(ref, dp=2, zero=3, steps=200)).returncode, 0)
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=3, steps=200)], stderr=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True, env=env())
            # the metrics file is opened before the first step: wait for a step in it, so there is one to save
            deadline = time.time() + 60
            path = os.path.join(d, "metrics.jsonl")
            while time.time() < deadline and not (os.path.exists(path) and "\n" in open(path).read()):
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("checkpoint saved", err)
            stopped = len(metrics(d))
            self.assertLess(stopped, 200, "the run ended before the signal: make it longer")
            r = run(job(d, dp=2, zero=3, steps=200))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(curve(metrics(d)), curve(metrics(ref)))  # same layout: bitwise

    def test_sigterm_during_start_up_stops_cleanly(self):
        # The launcher forwards a stop signal at once, maybe before a worker has reached its handler
        # (or its main()): every early moment must end like a later SIGTERM, exit 0. Right after the
        # first worker is spawned, or as soon as the launcher can take the signal, nothing can have
        # been trained: nothing is saved, and it says so.
        for moment in ["a worker was spawned", 0.0, 0.1, 0.3]:
            with self.subTest(moment=moment), tempfile.TemporaryDirectory() as d:
                t0 = time.monotonic()
                p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=100000, every=1)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env())
                try:
                    if moment == "a worker was spawned":
                        deadline = time.monotonic() + 60
                        while time.monotonic() < deadline and not children_of(p.pid):
                            time.sleep(0.001)
                        self.assertTrue(children_of(p.pid), "the launcher spawned no worker within 60 s")
                    else:
                        time.sleep(max(0.0, t0 + moment - time.monotonic()))
                        # Before its main() runs no program can catch a signal: on a loaded machine
                        # wait for the launcher to get there (it blocks the stop signals first).
                        deadline = time.monotonic() + 60
                        while time.monotonic() < deadline and not blocks_sigterm(p.pid):
                            time.sleep(0.001)
                    p.send_signal(signal.SIGTERM)
                    _, err = p.communicate(timeout=120)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.communicate()
                self.assertEqual(p.returncode, 0, err)
                self.assertNotIn("killed by signal", err)
                if moment in ("a worker was spawned", 0.0):
                    # At 0.0 the stop may come before the launcher spawned a worker: then it starts none.
                    self.assertTrue(re.search(r"\[rank 0/\d+ [^\]]*\] train info: stop requested before the first step: "
                                              r"nothing to save", err) or
                                    (moment == 0.0 and "SIGTERM before any worker started: nothing to save" in err),
                                    err)
                    # The directory is claimed at start (its job.lock); no step was written into it.
                    ckpt = os.path.join(d, "ckpt")
                    saved = [n for n in os.listdir(ckpt) if n != "job.lock"] if os.path.isdir(ckpt) else []
                    self.assertEqual(saved, [], err)
                else:
                    self.assertTrue("nothing to save" in err or "checkpoint saved" in err, err)

    def test_a_stop_before_the_workers_are_spawned_starts_none(self):
        # `timeout 3 ptrain run` of a 405B job went on starting workers for ten minutes: the launcher
        # read its signals only once all were spawned. A SIGTERM pending from the start (blocked and
        # raised before exec, as one that came while the job was loaded) must end the launch at once.
        def stop_pending():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            os.kill(os.getpid(), signal.SIGTERM)
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=8), preexec_fn=stop_pending, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"\[launcher \S+\] launch info: SIGTERM before any worker started: nothing to save")
            self.assertIn("started 0 of 8 workers; starting no more", r.stderr)
            self.assertNotIn("[rank", r.stderr + r.stdout)
            self.assertFalse(os.path.exists(os.path.join(d, "metrics.jsonl")))

    def test_strangers_on_the_store_port_do_not_disturb_the_job(self):
        with tempfile.TemporaryDirectory() as d:
            # 1,000 steps (a few seconds): the job must still be training when the strangers connect
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=1000)], stderr=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True, env=env())
            port = store_port_once_training(p, d)
            wrong_token = b"PTRS\x01" + (5).to_bytes(4, "big") + b"guess"
            strangers = []
            for payload in [b"GET / HTTP/1.0\r\n\r\n", wrong_token, b"PTRS\x01\xff\xff\xff\xff", b""]:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(payload)
                strangers.append(sock)
            _, err = p.communicate(timeout=120)
            for sock in strangers:
                sock.close()
            self.assertEqual(p.returncode, 0, err)
            self.assertEqual(len(metrics(d)), 1000)
            self.assertIn("dropped connection", err)

    def test_a_flood_of_idle_connections_leaves_the_job_its_descriptors(self):
        # 1,100 connections that never send their handshake, held open while the job trains and
        # checkpoints every 2 steps with the usual limit of 1024 descriptors: the store must cap
        # them, so the job's own files still open, and its clients keep working.
        flood = 1100
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < flood + 200:
            self.skipTest(f"the hard descriptor limit {hard} is too low to hold {flood} connections")
        if soft != resource.RLIM_INFINITY and soft < flood + 200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (flood + 200, hard))  # for our own sockets
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        job_limit = 1024 if hard == resource.RLIM_INFINITY else min(1024, hard)
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([PTRAIN, "run", job(d, dp=2, zero=1, steps=100000, every=2)], stderr=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, text=True, env=env(),
                                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (job_limit, hard)))
            socks = []
            try:
                port = store_port_once_training(p, d)
                for _ in range(flood):
                    try:
                        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                    except OSError:
                        break  # the job died (the failure checked below) or stopped accepting
                held_from = len(metrics(d))
                # Held until the job has checkpointed a few times more (or died).
                deadline = time.time() + 60
                while time.time() < deadline and p.poll() is None and len(metrics(d)) < held_from + 8:
                    time.sleep(0.05)
                ended_early = p.poll() is not None
                if not ended_early:
                    p.send_signal(signal.SIGTERM)
                _, err = p.communicate(timeout=120)
            finally:
                for sock in socks:
                    sock.close()
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            errors = "\n".join(line for line in err.splitlines() if "dropped connection" not in line)
            self.assertFalse(ended_early, f"the job ended while the connections were held:\n{errors[-5000:]}")
            self.assertEqual(len(socks), flood)
            self.assertEqual(p.returncode, 0, errors[-5000:])
            self.assertNotIn("Too many open files", err)
            self.assertIn("checkpoint saved", err)
            self.assertGreaterEqual(len(metrics(d)), held_from + 8)

    def test_the_local_launcher_honours_master_addr_and_port(self):
        with tempfile.TemporaryDirectory() as d, socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            r = run(job(d, dp=2), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            self.assertEqual(r.returncode, 1, r.stderr)  # the port is taken: the launcher must not pick another
            self.assertIn(str(port), r.stderr)
            taken.close()
            r = run(job(d, dp=2), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_input_in_a_worker_is_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "train_000000.bin")
            with open(bad, "wb") as f:
                f.write(b"\x00" * 100)
            r = run(job(d, dp=2), "--set", "data.format=llmc", "--set", f"data.train={bad}")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("train_000000.bin", r.stderr)

    def test_bad_fault_setting_is_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            r = run(job(d, dp=1), PTRAIN_DEBUG_FAULT="one:two")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("PTRAIN_DEBUG_FAULT", r.stderr)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
