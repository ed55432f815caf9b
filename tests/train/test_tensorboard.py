"""logging.tensorboard, read back by a decoder that is not ptrain's: the TFRecord framing (lengths,
masked CRC32C of each) checked here, every record parsed by protobuf's own Python parser against
TensorBoard's event schema (tensorboard/compat/proto/event.proto and summary.proto: Event,
Summary, Summary.Value, their field numbers), stated below independently of ptrain's .proto. The
scalars must equal the metrics JSONL of the same run; where TensorBoard is installed (the GPU
machine), its own EventAccumulator reads them too. Needs python3-protobuf (Debian), so CMake runs it
with /usr/bin/python3.
    /usr/bin/python3 tests/train/test_tensorboard.py --ptrain build/ptrain [-v]"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PTRAIN = ""

JOB = """\
name: tensorboard-test
backend: cpu
model: {{arch: llama, layers: 2, hidden: 32, heads: 4, kv_heads: 2, ffn_hidden: 64, vocab: 97, seq_len: 16}}
parallel: {{zero: 1}}
train: {{steps: 12, global_batch: 8, micro_batch: 2, precision: fp32, seed: 3}}
optimizer: {{lr: 1.0e-2, warmup_steps: 2}}
data: {{format: synthetic, eval_every: 5}}
cluster: {{nodes: 1, gpus_per_node: 2, gpu: cpu}}
logging: {{every: 4, metrics: {d}/metrics.jsonl, tensorboard: {d}/tb}}
"""


def tensorboard_event_class():
    """TensorBoard's Event message, built from its field numbers (proto3, package tensorboard)."""
    f = descriptor_pb2.FileDescriptorProto(name="tensorboard_event_test.proto", package="tensorboard", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="node_name", number=7, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.oneof_decl.add(name="value")
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL, oneof_index=0)
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                      type_name=".tensorboard.Summary.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.oneof_decl.add(name="what")
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=T.TYPE_BYTES, label=T.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".tensorboard.Summary")
    session_log = f.message_type.add(name="SessionLog")  # its status enum read as the number it is
    session_log.field.add(name="status", number=1, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    session_log.field.add(name="checkpoint_path", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    session_log.field.add(name="msg", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    event.field.add(name="session_log", number=7, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".tensorboard.SessionLog")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tensorboard.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf 4.21 on (5 removed GetPrototype)
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The payloads of a TFRecord file, each frame's CRCs checked."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 0
    while at < len(data):
        header = data[at:at + 12]
        length, length_crc = struct.unpack("<QI", header)
        assert masked(crc32c(header[:8])) == length_crc, f"length CRC at byte {at}"
        payload = data[at + 12:at + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert masked(crc32c(payload)) == payload_crc, f"data CRC at byte {at}"
        out.append(payload)
        at += 16 + length
    return out


class TensorBoard(unittest.TestCase):
    def run_job(self, d, text=None):
        """`ptrain run` of the test job (or `text`) in d; the result."""
        job = os.path.join(d, "job.yaml")
        with open(job, "w") as f:
            f.write(text or JOB.format(d=d))
        r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True, timeout=300)
        if text is None:
            self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_crc32c_of_the_check_string(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)  # the CRC-32C check value

    def test_events_hold_the_runs_metrics(self):
        Event = tensorboard_event_class()
        with tempfile.TemporaryDirectory() as d:
            self.run_job(d)
            files = glob.glob(os.path.join(d, "tb", "events.out.tfevents.*"))
            self.assertEqual(len(files), 1, files)
            events = [Event.FromString(payload) for payload in records(files[0])]
            with open(os.path.join(d, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f]
        self.assertEqual(events[0].file_version, "brain.Event:2")
        steps = events[1:]
        self.assertEqual([e.step for e in steps], [row["step"] for row in rows])
        self.assertEqual([e.wall_time for e in steps], sorted(e.wall_time for e in steps))
        for e, row in zip(steps, rows):
            self.assertEqual(e.WhichOneof("what"), "summary")
            scalars = {v.tag: v.simple_value for v in e.summary.value}
            expected = {"loss/train": row["loss"], "optimizer/lr": row["lr"], "optimizer/grad_norm": row["grad_norm"],
                        "throughput/tokens_per_s": row["tokens_per_s"], "time/step_s": row["step_s"],
                        "memory/bytes": row["memory_bytes"], "comm/bytes/dp": row["comm_bytes"]["dp"]}
            if "val_loss" in row:
                expected["loss/validation"] = row["val_loss"]
            for tag, value in expected.items():
                self.assertAlmostEqual(scalars[tag], value, delta=abs(value) * 1e-6, msg=f"step {e.step} {tag}")
            self.assertEqual("loss/validation" in scalars, "val_loss" in row)
        self.assertEqual(sum("loss/validation" in {v.tag for v in e.summary.value} for e in steps), 3)  # 5, 10, 12

    def test_tensorboard_itself_reads_the_scalars(self):
        try:
            from tensorboard.backend.event_processing import event_accumulator
        except ImportError:
            self.skipTest("TensorBoard is not installed here (it is on the GPU machine)")
        with tempfile.TemporaryDirectory() as d:
            self.run_job(d)
            accumulator = event_accumulator.EventAccumulator(os.path.join(d, "tb"))
            accumulator.Reload()
            with open(os.path.join(d, "metrics.jsonl")) as f:
                rows = [json.loads(line) for line in f]
        self.assertIn("loss/train", accumulator.Tags()["scalars"])
        losses = [(e.step, e.value) for e in accumulator.Scalars("loss/train")]
        self.assertEqual([s for s, _ in losses], [row["step"] for row in rows])
        for (_, value), row in zip(losses, rows):
            self.assertAlmostEqual(value, row["loss"], delta=abs(row["loss"]) * 1e-6)

    def test_a_resumed_run_marks_its_restart_and_a_fresh_one_is_refused(self):
        # issue 42: a resumed run's event file went beside the earlier one's, whose events after the
        # checkpoint TensorBoard showed mixed with the new ones. Its first event is now TensorBoard's
        # restart marker (SessionLog START at the first step it trains); and a run from the beginning
        # into a directory of another run's events is refused (exit 2) before it writes one.
        Event = tensorboard_event_class()
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.yaml")
            with open(job, "w") as f:
                # step 4's save in the foreground: a background one may not be committed before the crash
                f.write(JOB.format(d=d) + f"checkpoint: {{dir: {d}/ckpt, every: 4, async: false}}\n")
            r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, PTRAIN_DEBUG_FAULT="0:7:exit"))
            self.assertNotEqual(r.returncode, 0, r.stderr)
            first = glob.glob(os.path.join(d, "tb", "events.out.tfevents.*"))
            self.assertEqual(len(first), 1, first)
            r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            (second,) = set(glob.glob(os.path.join(d, "tb", "events.out.tfevents.*"))) - set(first)
            events = [Event.FromString(payload) for payload in records(second)]
            self.assertEqual(events[0].file_version, "brain.Event:2")
            self.assertEqual(events[1].WhichOneof("what"), "session_log")
            self.assertEqual((events[1].step, events[1].session_log.status), (5, 1))  # START at step 5
            self.assertIn("(after step 4)", events[1].session_log.msg)
            self.assertEqual([e.step for e in events[2:]], list(range(5, 13)))
            os.rename(os.path.join(d, "metrics.jsonl"), os.path.join(d, "metrics.moved"))  # no run named now
            shutil.rmtree(os.path.join(d, "ckpt"))
            r = subprocess.run([PTRAIN, "run", job], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"logging.tensorboard: '{d}/tb' holds the events of an earlier run", r.stderr)
            self.assertEqual(len(glob.glob(os.path.join(d, "tb", "events.out.tfevents.*"))), 2)

    def test_an_unwritable_directory_is_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_job(d, JOB.format(d=d).replace(f"tensorboard: {d}/tb", f"tensorboard: {d}/job.yaml/tb"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("logging.tensorboard: cannot open", r.stderr)

    def test_a_full_disk_is_exit_one_with_its_cause(self):
        # It was exit 1 with "writing '...' failed" alone: now the cause, the event lost and the
        # checkpoint the next run resumes from; both ranks stop, no checkpoint saved after the loss,
        # and the file ends with a whole event.
        import full_disk
        with tempfile.TemporaryDirectory() as d, full_disk.small_filesystem(self, "16k") as full:
            text = JOB.format(d=d).replace(f"tensorboard: {d}/tb", f"tensorboard: {full}/tb")
            # saves in the foreground: the test names the last one before the loss, which a background
            # save on a loaded machine may not yet have committed
            text = text.replace("steps: 12", "steps: 300") + f"checkpoint: {{dir: {d}/ckpt, every: 10, async: false}}\n"
            r = self.run_job(d, text)
            self.assertEqual(r.returncode, 1, r.stderr)
            files = glob.glob(os.path.join(full, "tb", "events.out.tfevents.*"))
            self.assertEqual(len(files), 1, files)
            self.assertIn(f"logging.tensorboard: cannot write '{files[0]}': No space left on device: the event of "
                          "step ", r.stderr)
            lost = int(re.search(r"the event of step (\d+) was not written", r.stderr).group(1))
            Event = tensorboard_event_class()
            steps = [Event.FromString(payload).step for payload in records(files[0])][1:]
            self.assertEqual(steps, list(range(1, lost)))
            saved = (lost - 1) // 10 * 10
            self.assertGreater(saved, 0)
            self.assertIn(f"the next run resumes from {d}/ckpt/step_{saved}", r.stderr)
            with open(os.path.join(d, "ckpt", "latest")) as f:
                self.assertEqual(f.read().strip(), f"step_{saved}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
