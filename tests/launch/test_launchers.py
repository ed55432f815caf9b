"""`ptrain run` under every launcher: its own local launcher, Open MPI's mpirun and Slurm's srun.

Every launcher runs the same 4-rank data-parallel job (ZeRO-1) on CPU. Changing dp keeps the
global batch, so each loss curve must match a 1-rank run of the job within 1e-5 relative; the
checkpoint must hold 4 shards of a dp=4 layout (each process really was one rank of four), bitwise
the same as the local launcher's. A bad launch environment must be a clear error with exit 2, and a
process that reaches another job's store (the same MASTER_ADDR:MASTER_PORT) must fail at once, naming
it, instead of training with that job.

The srun tests start a private one-node Slurm cluster (tests/launch/slurm_cluster.sh, as root) in a
temporary state directory on free ports, and always stop it, then check that none of its daemons,
steps or tasks are left. Each launcher run's wall time is printed to stderr.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PTRAIN = ""
HERE = os.path.dirname(os.path.abspath(__file__))
SLURM_CLUSTER = os.path.join(HERE, "slurm_cluster.sh")

STEPS = 12
RANKS = 4
RTOL = 1e-5

JOB = """\
name: launch-test
backend: cpu
model: {{arch: gpt2, layers: 2, hidden: 32, heads: 4, vocab: 97, seq_len: 16}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 1, precision: fp32, seed: 3}}
optimizer: {{lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 5}}
data: {{format: synthetic}}
checkpoint: {{dir: {dir}/ckpt, every: {steps}, keep: 1}}
cluster: {{nodes: 1, gpus_per_node: {ranks}, gpu: cpu}}
parallel: {{dp: auto, zero: 1}}
comm: {{timeout_s: 60}}
logging: {{every: 1, metrics: {dir}/metrics.jsonl}}
"""

# Variables through which a launcher tells a process who it is. The tests start from an
# environment without any of them (ctest may itself run under mpirun, srun or torchrun), then add
# exactly the ones each case needs.
LAUNCH_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "PTRAIN_LAUNCHED", "PTRAIN_JOB_TOKEN", "PTRAIN_STORE_FD", "PTRAIN_DEBUG_FAULT",
               "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}
LAUNCH_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith(LAUNCH_PREFIXES)}
    env["OMP_NUM_THREADS"] = "1"  # 4 ranks on a small machine: one thread each
    env.update(extra)
    return env


def log(message):
    sys.stderr.write(f"[launchers] {message}\n")
    sys.stderr.flush()


def make_job(d):
    path = os.path.join(d, "job.yaml")
    with open(path, "w") as f:
        f.write(JOB.format(steps=STEPS, ranks=RANKS, dir=d))
    return path


def wait_for(p, label, timeout):
    """Waits for p, started in its own process group; on timeout kills the group and fails."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{label}: no exit after {timeout} s (hung?)\n--- stdout\n{out}\n--- stderr\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run_timed(label, cmd, env, cwd, timeout=300):
    """Runs cmd in its own process group, prints its wall time; on timeout kills the group."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    r = wait_for(p, label, timeout)
    log(f"{label}: exit {p.returncode}, {time.monotonic() - start:.2f} s wall")
    return r


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def shards(d):
    """rank -> bytes of the final checkpoint's shards."""
    step = os.path.join(d, "ckpt", f"step_{STEPS}")
    out = {}
    for r in range(RANKS):
        path = os.path.join(step, f"rank_{r}.safetensors")
        if os.path.exists(path):
            with open(path, "rb") as f:
                out[r] = f.read()
    return out


_reference = None  # loss curve of the 1-rank run
_local = None      # shards of the local launcher's 4-rank run


def reference_losses():
    global _reference
    if _reference is None:
        with tempfile.TemporaryDirectory() as d:
            r = run_timed("reference: ptrain run --nproc 1 --set parallel.dp=1",
                          [PTRAIN, "run", make_job(d), "--nproc", "1", "--set", "parallel.dp=1"], clean_env(), d)
            if r.returncode != 0:
                raise AssertionError(f"the 1-rank reference run failed (exit {r.returncode}):\n{r.stderr}")
            m = metrics(d)
            if [x["step"] for x in m] != list(range(1, STEPS + 1)):
                raise AssertionError(f"the 1-rank reference logged steps {[x['step'] for x in m]}")
            _reference = [x["loss"] for x in m]
    return _reference


class LauncherCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ptrain-launch-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.job = make_job(self.dir)

    def check_training(self, label, r, compare_local=True):
        """The run exited 0 as 4 ranks and trained exactly like the 1-rank reference."""
        self.assertEqual(r.returncode, 0, f"{label}: exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
        m = metrics(self.dir)
        self.assertEqual([x["step"] for x in m], list(range(1, STEPS + 1)), f"{label}: steps in rank 0's metrics")
        losses = [x["loss"] for x in m]
        ref = reference_losses()
        for step, (got, want) in enumerate(zip(losses, ref), start=1):
            self.assertLessEqual(abs(got - want), RTOL * abs(want),
                                 f"{label}: step {step} loss {got!r}, 1-rank reference {want!r}\n"
                                 f"all: {losses}\nref: {ref}")
        # Each process was one rank of a 4-rank dp job (not 4 separate 1-rank jobs, nor a launcher
        # that spawned 4 more workers): one checkpoint, dp=4 in its manifest, a shard per rank.
        with open(os.path.join(self.dir, "ckpt", f"step_{STEPS}", "manifest.json")) as f:
            layout = json.load(f)["job"]["layout"]
        self.assertEqual((layout["world"], layout["dp"]), (RANKS, RANKS), f"{label}: layout {layout}")
        got = shards(self.dir)
        self.assertEqual(sorted(got), list(range(RANKS)), f"{label}: checkpoint shards")
        if compare_local:
            # The same 4-rank computation under another launcher: the same bits.
            local = local_shards()
            for rank in range(RANKS):
                self.assertTrue(got[rank] == local[rank],
                                f"{label}: rank {rank}'s shard differs from the local launcher's")
        return m


def local_shards():
    global _local
    if _local is None:
        d = tempfile.mkdtemp(prefix="ptrain-launch-local-")
        try:
            r = run_timed("local launcher: ptrain run (4 ranks)", [PTRAIN, "run", make_job(d)], clean_env(), d)
            if r.returncode != 0:
                raise AssertionError(f"the local launcher's 4-rank run failed (exit {r.returncode}):\n{r.stderr}")
            _local = shards(d)
        finally:
            shutil.rmtree(d, True)
    return _local


class LocalLauncher(LauncherCase):
    def test_local_launcher_matches_one_rank(self):
        r = run_timed("local launcher: ptrain run (4 ranks)", [PTRAIN, "run", self.job], clean_env(), self.dir)
        self.check_training("local launcher", r, compare_local=False)
        self.assertEqual(r.stdout.count(f"step     {STEPS}/{STEPS}"), 1, r.stdout)  # rank 0's, unprefixed
        global _local
        if _local is None:
            _local = shards(self.dir)


def mpirun_cmd(np):
    # --mca plm isolated: every rank on this machine, no ssh/rsh agent and no Slurm even when the
    # test itself runs inside an allocation; -x: variables exported to the ranks.
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "plm", "isolated",
            "-x", "OMP_NUM_THREADS", "-np", str(np)]


@unittest.skipUnless(shutil.which("mpirun"), "mpirun not found (Debian package openmpi-bin, see scripts/setup.sh)")
class Mpirun(LauncherCase):
    def test_mpirun_matches_one_rank(self):
        r = run_timed(f"mpirun -np {RANKS}", [*mpirun_cmd(RANKS), PTRAIN, "run", self.job], clean_env(), self.dir)
        self.check_training("mpirun", r)
        # Only rank 0 reports, once per step.
        self.assertEqual(r.stdout.count(f"step     {STEPS}/{STEPS}"), 1, r.stdout)

    def test_mpirun_world_that_breaks_the_config_is_bad_input(self):
        # 3 ranks: global_batch 8 is not divisible by micro_batch*dp = 3. Every rank exits 2, and
        # the diagnostic is printed once (by rank 0), naming the key.
        r = run_timed("mpirun -np 3 (bad world)", [*mpirun_cmd(3), PTRAIN, "run", self.job], clean_env(), self.dir,
                      timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.count("is not divisible by train.micro_batch*dp = 1*3"), 1, r.stderr)

    def test_ranks_of_a_killed_mpirun_stop_with_a_checkpoint(self):
        # kill -9 of mpirun took its daemons but not the ranks: they trained on as orphans to the last
        # step, holding checkpoint.dir. Now each stops as on SIGTERM when its parent goes.
        with open(self.job) as f:
            text = f.read().replace(f"steps: {STEPS}", "steps: 100000")
        with open(self.job, "w") as f:
            f.write(text)
        p = subprocess.Popen([*mpirun_cmd(2), PTRAIN, "run", self.job], cwd=self.dir, env=clean_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        # A step logged (the file is opened before the first step: a stop before that saves nothing).
        metrics = os.path.join(self.dir, "metrics.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
            time.sleep(0.2)
        def ranks():
            found = []
            for pid in os.listdir("/proc"):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if self.job.encode() in f.read() and int(pid) != p.pid:
                            found.append(int(pid))
                except (OSError, ValueError):
                    pass
            return found
        self.assertEqual(len(ranks()), 2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        deadline = time.time() + 60
        while time.time() < deadline and ranks():
            time.sleep(0.2)
        left = ranks()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        self.assertEqual(left, [], "ranks of the killed mpirun trained on")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "ckpt", "latest")), "no checkpoint was saved")

    def test_mpirun_nproc_mismatch_is_bad_input(self):
        r = run_timed("mpirun -np 2 --nproc 4", [*mpirun_cmd(2), PTRAIN, "run", self.job, "--nproc", "4"],
                      clean_env(), self.dir, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--nproc 4, but the mpirun launcher started 2 ranks", r.stderr)


# A log line (engine/log/log.h): the time in UTC, who wrote it, the subsystem and the level.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                      r"\[(?:rank (?P<rank>\d+)/(?P<world>\d+) \S+ local (?P<local>\d+)|launcher \S+)\] "
                      r"(?:launch|store|comm|train|ckpt|data|plan|kernels) "
                      r"(?P<level>trace|debug|info|warning|error): ")
LOG_RANKS = 2


class Logs(unittest.TestCase):
    """The logs of a 2-rank job under mpirun and the local launcher: every line on stderr says when,
    which rank (with its host and local rank) and how bad; PTRAIN_LOG_LEVEL chooses how much; each
    rank keeps its lines in logs/rank_<R>.log beside the metrics, appended to by a later run."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ptrain-launch-logs-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.job = os.path.join(self.dir, "job.yaml")
        with open(self.job, "w") as f:
            f.write(JOB.format(steps=3, ranks=LOG_RANKS, dir=self.dir))

    def run_job(self, label, launcher, steps=3, **env):
        r = run_timed(label, [*launcher, PTRAIN, "run", self.job, "--set", f"train.steps={steps}"], clean_env(**env),
                      self.dir, timeout=180)
        self.assertEqual(r.returncode, 0, f"{label}: exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
        self.assertEqual(r.stdout.count(f"step {steps:6d}/{steps}"), 1,
                         f"{label}: the step line is rank 0's output\n{r.stdout}")
        return r

    def log_lines(self, label, text):
        """The lines of `text`, each a log line; a line that is not fails the test, naming it."""
        lines = [line for line in text.splitlines() if line]
        for line in lines:
            self.assertRegex(line, LOG_LINE, f"{label}: a line without time, rank and level")
        return [LOG_LINE.match(line) for line in lines]

    def rank_file(self, rank):
        return os.path.join(self.dir, "logs", f"rank_{rank}.log")

    def check_files(self, label, levels):
        for rank in range(LOG_RANKS):
            with open(self.rank_file(rank)) as f:
                lines = self.log_lines(f"{label}: logs/rank_{rank}.log", f.read())
            self.assertEqual({m["rank"] for m in lines}, {str(rank)}, f"{label}: rank {rank}'s file")
            self.assertTrue({m["level"] for m in lines} & levels, f"{label}: rank {rank}'s file has no {levels} line")

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not found (Debian package openmpi-bin, see scripts/setup.sh)")
    def test_mpirun_debug_lines_say_time_rank_and_level(self):
        r = self.run_job("mpirun -np 2, PTRAIN_LOG_LEVEL=debug",
                         [*mpirun_cmd(LOG_RANKS), "-x", "PTRAIN_LOG_LEVEL"], PTRAIN_LOG_LEVEL="debug")
        lines = self.log_lines("mpirun", r.stderr)
        self.assertEqual({(m["rank"], m["world"]) for m in lines}, {("0", "2"), ("1", "2")}, r.stderr)
        for rank in ("0", "1"):  # debug chosen: every rank shows its debug and info lines
            levels = {m["level"] for m in lines if m["rank"] == rank}
            self.assertTrue({"debug", "info"} <= levels, f"rank {rank} showed {levels}\n{r.stderr}")
        self.check_files("mpirun", {"debug"})
        for rank in range(LOG_RANKS):  # logged before the file opened: the file starts with it
            with open(self.rank_file(rank)) as f:
                self.assertIn(f"launch debug: started by mpirun: rank {rank} of 2", f.read())

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not found (Debian package openmpi-bin, see scripts/setup.sh)")
    def test_mpirun_warn_shows_no_info_line(self):
        r = self.run_job("mpirun -np 2, PTRAIN_LOG_LEVEL=warn",
                         [*mpirun_cmd(LOG_RANKS), "-x", "PTRAIN_LOG_LEVEL"], PTRAIN_LOG_LEVEL="warn")
        lines = self.log_lines("mpirun", r.stderr)
        self.assertEqual([m.group(0) for m in lines if m["level"] in ("info", "debug", "trace")], [], r.stderr)
        for rank in range(LOG_RANKS):  # nor in the files, which hold what the loggers pass
            with open(self.rank_file(rank)) as f:
                self.assertNotRegex(f.read(), r"\] \w+ (info|debug|trace): ")

    def test_local_launcher_lines_and_files(self):
        # Unset: rank 0's info lines on the terminal, rank 1's only in its file; the launcher adds no
        # prefix of its own to its workers' lines, and keeps its own file.
        r = self.run_job("local launcher (2 ranks)", [])
        lines = self.log_lines("local launcher", r.stderr)
        self.assertIn("0", {m["rank"] for m in lines if m["level"] == "info"}, r.stderr)
        self.assertEqual([m.group(0) for m in lines if m["rank"] == "1" and m["level"] == "info"], [], r.stderr)
        self.assertNotIn("[rank 1] ", r.stderr + r.stdout)
        self.check_files("local launcher", {"info"})
        self.assertTrue(os.path.exists(os.path.join(self.dir, "logs", "launcher.log")))
        # A second run appends: the first run's lines stay.
        with open(self.rank_file(1)) as f:
            first = f.read()
        self.run_job("local launcher, again (2 ranks)", [], steps=4, PTRAIN_LOG_LEVEL="info,comm=debug")
        with open(self.rank_file(1)) as f:
            second = f.read()
        self.assertTrue(second.startswith(first) and len(second) > len(first), "the second run replaced rank 1's file")

    def test_bad_level_is_bad_input(self):
        for value in ["loud", "info,com=debug"]:
            with self.subTest(value=value):
                r = run_timed(f"PTRAIN_LOG_LEVEL={value}", [PTRAIN, "run", self.job],
                              clean_env(PTRAIN_LOG_LEVEL=value), self.dir, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"PTRAIN_LOG_LEVEL='{value}'", r.stderr)
                self.assertIn("(trace, debug, info, warn, error, off)" if value == "loud" else
                              "(launch, store, comm, train, ckpt, data, plan, kernels)", r.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.dir, "metrics.jsonl")))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def our_processes(state_dir, pids):
    """Live processes of our cluster: the daemons' recorded pids, and any slurm/munge daemon, step,
    client or ptrain task whose command line or environment names our state dir."""
    found = {}
    for pid in pids:
        if os.path.exists(f"/proc/{pid}"):
            found[pid] = "pid file"
    names = {"munged", "slurmctld", "slurmd", "slurmstepd", "srun", "ptrain"}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
            if comm not in names:
                continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie: dead, only waiting for its parent
            blobs = []
            for what in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{entry}/{what}", "rb") as f:
                        blobs.append(f.read())
                except OSError:
                    pass
        except (OSError, IndexError):
            continue
        if any(state_dir.encode() in b for b in blobs):
            found[int(entry)] = comm
    return found


class SlurmCase(LauncherCase):
    """Starts a private Slurm cluster for the class and always stops it."""
    RESV_PORTS = None  # e.g. "31000-31999": MpiParams=ports, so steps get SLURM_STEP_RESV_PORTS

    @classmethod
    def setUpClass(cls):
        missing = [b for b in ["munged", "slurmctld", "slurmd", "sinfo", "srun", "scancel", "squeue"]
                   if not shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
        if missing:
            raise unittest.SkipTest(f"Slurm/munge not installed ({', '.join(missing)} missing; Debian packages "
                                    "slurmctld slurmd slurm-client munge, see scripts/setup.sh)")
        cls.root = tempfile.mkdtemp(prefix="ptrain-launch-slurm-")
        cls.addClassCleanup(shutil.rmtree, cls.root, True)
        cls.state_dir = os.path.join(cls.root, "slurm")
        ctld_port = free_port()
        slurmd_port = free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        # Our own state dir and ports: another cluster of this script (a parallel run) is left alone.
        cls.script_env = dict(os.environ, PTRAIN_SLURM_DIR=cls.state_dir,
                              PTRAIN_SLURM_CTLD_PORT=str(ctld_port), PTRAIN_SLURMD_PORT=str(slurmd_port))
        cls.script_env.pop("SLURM_CONF", None)
        if cls.RESV_PORTS:
            cls.script_env["PTRAIN_SLURM_RESV_PORTS"] = cls.RESV_PORTS
        else:
            cls.script_env.pop("PTRAIN_SLURM_RESV_PORTS", None)
        cls.daemon_pids = []
        # Registered before starting: class cleanups run even when setUpClass fails half-way.
        cls.addClassCleanup(cls.stop_cluster)
        start = time.monotonic()
        r = subprocess.run(["bash", SLURM_CLUSTER, "start"], env=cls.script_env, capture_output=True, text=True,
                           timeout=120)
        log(f"slurm_cluster.sh start{' (resv ports ' + cls.RESV_PORTS + ')' if cls.RESV_PORTS else ''}: "
            f"exit {r.returncode}, {time.monotonic() - start:.2f} s")
        if r.returncode != 0:
            raise AssertionError(f"slurm_cluster.sh start failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
        cls.slurm_conf = os.path.join(cls.state_dir, "slurm.conf")
        if f"export SLURM_CONF={cls.slurm_conf}" not in r.stdout:
            raise AssertionError(f"slurm_cluster.sh start did not print the SLURM_CONF line:\n{r.stdout}")
        for name in ["munged", "slurmctld", "slurmd"]:
            with open(os.path.join(cls.state_dir, "run", f"{name}.pid")) as f:
                cls.daemon_pids.append(int(f.read().strip()))

    @classmethod
    def stop_cluster(cls):
        start = time.monotonic()
        r = subprocess.run(["bash", SLURM_CLUSTER, "stop"], env=cls.script_env, capture_output=True, text=True,
                           timeout=120)
        log(f"slurm_cluster.sh stop: exit {r.returncode}, {time.monotonic() - start:.2f} s")
        if r.returncode != 0:
            raise AssertionError(f"slurm_cluster.sh stop failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
        left = our_processes(cls.state_dir, cls.daemon_pids)
        if left:
            raise AssertionError(f"processes of our Slurm cluster outlived slurm_cluster.sh stop: {left}")
        if os.path.exists(cls.state_dir):
            raise AssertionError(f"slurm_cluster.sh stop left {cls.state_dir}")

    def srun_env(self):
        return clean_env(SLURM_CONF=self.slurm_conf)


class Srun(SlurmCase):
    def test_srun_matches_one_rank(self):
        r = run_timed(f"srun -n {RANKS}", ["srun", "-n", str(RANKS), PTRAIN, "run", self.job], self.srun_env(),
                      self.dir)
        self.check_training("srun", r)
        self.assertEqual(r.stdout.count(f"step     {STEPS}/{STEPS}"), 1, r.stdout)

    def test_srun_lines_say_time_rank_and_level(self):
        r = run_timed(f"srun -n {RANKS}, PTRAIN_LOG_LEVEL=debug", ["srun", "-n", str(RANKS), PTRAIN, "run", self.job],
                      clean_env(SLURM_CONF=self.slurm_conf, PTRAIN_LOG_LEVEL="debug"), self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [LOG_LINE.match(line) for line in r.stderr.splitlines() if line]
        self.assertNotIn(None, lines, r.stderr)
        self.assertEqual({m["rank"] for m in lines if m["level"] == "debug"}, {str(k) for k in range(RANKS)}, r.stderr)
        for rank in range(RANKS):
            self.assertTrue(os.path.exists(os.path.join(self.dir, "logs", f"rank_{rank}.log")))

    def test_srun_world_that_breaks_the_config_is_bad_input(self):
        r = run_timed("srun -n 3 (bad world)", ["srun", "-n", "3", PTRAIN, "run", self.job], self.srun_env(),
                      self.dir, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)  # srun exits with the highest exit code of its tasks
        self.assertEqual(r.stderr.count("is not divisible by train.micro_batch*dp = 1*3"), 1, r.stderr)


class SrunReservedPorts(SlurmCase):
    # With MpiParams=ports every step exports SLURM_STEP_RESV_PORTS, and the store listens on the
    # first of them instead of a port derived from the job and step ids.
    RESV_PORTS = "31000-31999"

    def test_srun_with_reserved_ports(self):
        probe = subprocess.run(["srun", "-n", "1", "printenv", "SLURM_STEP_RESV_PORTS"], env=self.srun_env(),
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        self.assertRegex(probe.stdout.strip(), r"^31\d\d\d", "the cluster hands out no reserved ports")
        r = run_timed(f"srun -n {RANKS} (reserved ports)", ["srun", "-n", str(RANKS), PTRAIN, "run", self.job],
                      self.srun_env(), self.dir)
        self.check_training("srun (reserved ports)", r)


class BadLaunchEnv(unittest.TestCase):
    """Launcher variables that are present but unusable: exit 2 at once, naming the variable."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ptrain-launch-bad-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.job = make_job(self.dir)

    def run_with(self, label, *args, **env):
        # A worker that got past detection would wait for its peers for comm.timeout_s (60 s):
        # 30 s is plenty for an immediate error.
        return run_timed(label, [PTRAIN, "run", self.job, *args], clean_env(**env), self.dir, timeout=30)

    def check_bad(self, r, *words):
        self.assertEqual(r.returncode, 2, f"exit {r.returncode}\n{r.stderr}")
        for word in words:
            self.assertIn(word, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "metrics.jsonl")))

    def test_rank_without_master_port(self):
        # torchrun-style RANK/WORLD_SIZE, all ranks local (store host 127.0.0.1), but no port and no
        # job id to derive one from.
        r = self.run_with("env: RANK=0 WORLD_SIZE=2, no MASTER_*", RANK="0", WORLD_SIZE="2")
        self.check_bad(r, "MASTER_PORT")

    def test_rank_with_bad_master_port(self):
        for port in ["notaport", "0", "70000", "29500x"]:
            with self.subTest(port=port):
                r = self.run_with(f"env: MASTER_PORT={port}", RANK="0", WORLD_SIZE="2", MASTER_PORT=port)
                self.check_bad(r, "MASTER_PORT", port)

    def test_local_launcher_with_bad_master_port(self):
        r = self.run_with("local launcher: MASTER_PORT=notaport", MASTER_PORT="notaport")
        self.check_bad(r, "MASTER_PORT", "notaport")

    def test_rank_outside_world(self):
        r = self.run_with("env: RANK=2 WORLD_SIZE=2", RANK="2", WORLD_SIZE="2", MASTER_PORT="29500")
        self.check_bad(r, "RANK=2")

    def test_malformed_rank(self):
        r = self.run_with("env: RANK=one", RANK="one", WORLD_SIZE="2", MASTER_PORT="29500")
        self.check_bad(r, "RANK", "one")

    def test_multi_machine_without_master_addr(self):
        r = self.run_with("env: 2 of 4 ranks here, no MASTER_ADDR", RANK="0", WORLD_SIZE="4", LOCAL_RANK="0",
                          LOCAL_WORLD_SIZE="2", MASTER_PORT="29500")
        self.check_bad(r, "MASTER_ADDR")

    def test_srun_variables_without_tasks_per_node(self):
        # What a hand-made or broken srun environment looks like: a step id, but no task layout.
        r = self.run_with("srun vars without SLURM_STEP_TASKS_PER_NODE", SLURM_PROCID="0", SLURM_LOCALID="0",
                          SLURM_STEP_NUM_TASKS="4", SLURM_STEP_ID="0", SLURM_JOB_ID="1")
        self.check_bad(r, "SLURM_STEP_TASKS_PER_NODE")

    def test_nproc_disagrees_with_launcher(self):
        r = self.run_with("env: WORLD_SIZE=2 with --nproc 4", "--nproc", "4", RANK="0", WORLD_SIZE="2",
                          MASTER_PORT="29500", PTRAIN_JOB_TOKEN="t0")
        self.check_bad(r, "--nproc 4", "2 ranks")

    def test_torchrun_style_launch_without_a_job_token(self):
        # Nothing in RANK/WORLD_SIZE/MASTER_* names the job: a token derived from them would let a
        # second job on the same port join this one. The user must hand every rank a fresh token.
        for extra in [{}, {"TORCHELASTIC_RUN_ID": "none"}]:
            with self.subTest(**extra):
                r = self.run_with("env: no PTRAIN_JOB_TOKEN", RANK="0", WORLD_SIZE="2", MASTER_PORT=str(free_port()),
                                  **extra)
                self.check_bad(r, "PTRAIN_JOB_TOKEN", "/dev/urandom", "every rank")


def start_rank(job, cwd, rank, port, token, *args, world=2):
    """One torchrun-style rank of a `world`-rank job whose store is 127.0.0.1:port."""
    env = clean_env(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                    PTRAIN_JOB_TOKEN=token)
    return subprocess.Popen([PTRAIN, "run", job, *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


class SharedStorePort(LauncherCase):
    """Two jobs given the same MASTER_ADDR:MASTER_PORT must never train together: a process that does
    not belong to the job whose store it reaches fails at once, naming the store's address."""

    def setUp(self):
        super().setUp()
        self.procs = []
        self.addCleanup(self.kill_all)

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()

    def start(self, *args, cwd=None, job=None, **kwargs):
        p = start_rank(job or self.job, cwd or self.dir, *args, **kwargs)
        self.procs.append(p)
        return p

    def test_another_job_on_the_store_fails_at_once_and_the_job_trains_alone(self):
        port = free_port()
        rank0 = self.start(0, port, "job-a")
        where = f"127.0.0.1:{port}"
        # Strangers to job a, each started while a's rank 0 waits for its rank 1: another job's rank 1
        # with another token, one with a's token but another job file, and another job's rank 0.
        strangers = [("another token", (1, port, "job-b"), 1, ["token"]),
                     ("same token, another spec", (1, port, "job-a", "--set", "train.seed=4"), 2,
                      ["another job", "PTRAIN_JOB_TOKEN"]),
                     ("a second rank 0", (0, port, "job-b"), 1, ["in use"])]
        for label, args, code, words in strangers:
            with self.subTest(stranger=label):
                t0 = time.monotonic()
                r = wait_for(self.start(*args), label, timeout=45)
                seconds = time.monotonic() - t0
                log(f"stranger ({label}): exit {r.returncode}, {seconds:.2f} s")
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertLess(seconds, 20, "not at once: it waited for something")  # comm.timeout_s is 60
                for word in [where, *words]:
                    self.assertIn(word, r.stderr)
        self.assertIsNone(rank0.poll(), "job a's rank 0 did not wait for its own rank 1")
        rank1 = self.start(1, port, "job-a")
        r1 = wait_for(rank1, "job a's rank 1", timeout=120)
        r0 = wait_for(rank0, "job a's rank 0", timeout=60)
        self.assertEqual((r0.returncode, r1.returncode), (0, 0), r0.stderr + r1.stderr)
        losses = [x["loss"] for x in metrics(self.dir)]
        ref = reference_losses()
        self.assertEqual(len(losses), len(ref))
        for step, (got, want) in enumerate(zip(losses, ref), start=1):
            self.assertLessEqual(abs(got - want), RTOL * abs(want), f"step {step}: {losses} vs {ref}")

    def test_ranks_given_their_own_records_paths_are_one_job(self):
        # torchrun-style ranks, each given its own --set logging.metrics, were refused as "another job":
        # the identity counted overrides that change only what rank 0 writes, not the training.
        port = free_port()
        own = tempfile.mkdtemp(prefix="ptrain-launch-rank1-")
        self.addCleanup(shutil.rmtree, own, True)
        rank0 = self.start(0, port, "job-m")
        rank1 = self.start(1, port, "job-m", "--set", f"logging.metrics={own}/metrics.jsonl", "--set", "logging.every=3",
                           "--set", f"logging.tensorboard={own}/tb", "--set", "logging.straggler_ratio=1.5",
                           "--set", "logging.straggler_steps=2")
        results = [wait_for(p, f"rank {r}", timeout=120) for r, p in enumerate((rank0, rank1))]
        self.assertEqual([r.returncode for r in results], [0, 0], results[0].stderr + results[1].stderr)
        self.assertEqual(len(metrics(self.dir)), STEPS)  # rank 0's records, where its job says
        self.assertTrue(os.path.exists(os.path.join(own, "logs", "rank_1.log")))  # rank 1's log beside its path
        # a trace on one rank only is another job (every rank records its spans and joins in writing it)
        port = free_port()
        rank0 = self.start(0, port, "job-t", "--set", f"logging.metrics={own}/m2.jsonl")
        rank1 = self.start(1, port, "job-t", "--set", f"logging.trace={own}/trace.json")
        r1 = wait_for(rank1, "rank 1 with a trace", timeout=45)
        self.assertEqual(r1.returncode, 2, r1.stderr)
        self.assertIn("another job", r1.stderr)

    def test_a_stop_while_waiting_for_the_other_ranks_ends_the_rank_at_once(self):
        # The rendezvous waits ignored SIGINT/SIGTERM until comm.timeout_s (here 60 s; 600 by default),
        # then exited 1. Nothing is saved before the first step: a stop ends a waiting rank, exit 0.
        for rank, sig in ((0, signal.SIGTERM), (1, signal.SIGINT)):
            with self.subTest(rank=rank):
                p = self.start(rank, free_port(), "job-s")
                time.sleep(1.5)  # rank 0 waits for rank 1 to join, rank 1 for a store that is not up
                t0 = time.monotonic()
                p.send_signal(sig)
                r = wait_for(p, f"rank {rank}", timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertLess(time.monotonic() - t0, 10)
                if rank == 0:
                    self.assertIn("stop requested before the first step: nothing to save", r.stderr)

    def test_every_rank_resumes_the_step_rank_0_found(self):
        # A relative checkpoint.dir with ranks in two working directories: rank 0 resumed at its step
        # and rank 1, finding nothing in its own cwd, from the seed; they trained on mismatched until
        # a bare collective timeout. Now every rank reads the step rank 0 found (here, by its path).
        with open(self.job) as f:
            text = f.read().replace(f"dir: {self.dir}/ckpt", "dir: ckpt")
        relative = os.path.join(self.dir, "relative.yaml")
        with open(relative, "w") as f:
            f.write(text)
        other = tempfile.mkdtemp(prefix="ptrain-launch-other-")
        self.addCleanup(shutil.rmtree, other, True)
        port = free_port()
        first = [self.start(r, port, "job-r", "--set", "cluster.gpus_per_node=2", "--set", "train.steps=6",
                            job=relative) for r in (0, 1)]
        for r, proc in enumerate(first):
            self.assertEqual(wait_for(proc, f"first run, rank {r}", timeout=120).returncode, 0)
        port = free_port()
        second = [self.start(0, port, "job-r2", "--set", "cluster.gpus_per_node=2", job=relative),
                  self.start(1, port, "job-r2", "--set", "cluster.gpus_per_node=2", job=relative, cwd=other)]
        results = [wait_for(proc, f"second run, rank {r}", timeout=120) for r, proc in enumerate(second)]
        self.assertEqual([r.returncode for r in results], [0, 0], results[0].stderr + results[1].stderr)
        self.assertIn("at step 6", results[0].stderr)
        self.assertEqual([x["step"] for x in metrics(self.dir)][-1], STEPS)
        self.assertFalse(os.path.exists(os.path.join(other, "ckpt")), "rank 1 saved into its own cwd")

    def test_a_rank_claimed_twice_fails_the_second_claim(self):
        # Two processes with the same token and job both say they are rank 1 (one job launched twice
        # on one port): the second to claim the rank fails at once naming the store; the job goes on
        # with the first, which runs the same job file and overrides.
        port = free_port()
        claims = [self.start(1, port, "job-a"), self.start(1, port, "job-a")]
        time.sleep(1)  # both wait for rank 0's store
        rank0 = self.start(0, port, "job-a")
        results = [wait_for(p, label, timeout=120)
                   for p, label in [(claims[0], "rank 1"), (claims[1], "rank 1 again"), (rank0, "rank 0")]]
        everything = "\n".join(r.stderr for r in results)
        self.assertEqual(sorted(r.returncode for r in results), [0, 0, 2], everything)
        loser = next(r for r in results if r.returncode == 2)
        self.assertIn(f"127.0.0.1:{port}", loser.stderr)
        self.assertIn("rank 1 is already taken", loser.stderr)
        self.assertEqual(len(metrics(self.dir)), STEPS)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
