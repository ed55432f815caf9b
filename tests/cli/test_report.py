"""`ptrain report`: one self-contained HTML page of a run (nothing fetched, no script) with its
curves, its predictions and, with a trace, its measured pipeline step beside the simulated one; the
page renders in a real headless browser (Debian's chromium); bad input is exit 2.
    python3 tests/cli/test_report.py --ptrain build/ptrain [-v]"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

PTRAIN = ""

JOB = """\
name: report-test
backend: cpu
model: {arch: llama, layers: 4, hidden: 32, heads: 4, kv_heads: 2, ffn_hidden: 64, vocab: 96, seq_len: 16}
parallel: {pp: 2, zero: 1}
schedule: {kind: 1f1b}
train: {steps: 6, global_batch: 8, micro_batch: 1, precision: fp32, seed: 5}
optimizer: {lr: 1.0e-2, warmup_steps: 2}
data: {format: synthetic, eval_every: 0}
cluster: {nodes: 1, gpus_per_node: 4, gpu: cpu}
logging: {every: 2, metrics: RUN/metrics.jsonl, trace: RUN/trace.json}
"""


def ptrain(*args):
    return subprocess.run([PTRAIN, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.run_dir = cls.dir.name
        with open(os.path.join(cls.run_dir, "job.yaml"), "w") as f:
            f.write(JOB.replace("RUN", cls.run_dir))
        r = ptrain("run", os.path.join(cls.run_dir, "job.yaml"))
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def page(self):
        r = ptrain("report", self.run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        path = os.path.join(self.run_dir, "report.html")
        self.assertIn("wrote " + path, r.stderr)
        with open(path) as f:
            return path, f.read()

    def report_with_trace(self, edit):
        """`ptrain report` of this run with its trace as edit(trace) leaves it: the result, and the
        page where one was written."""
        with open(os.path.join(self.run_dir, "trace.json")) as f:
            trace = json.load(f)
        edit(trace)
        with tempfile.TemporaryDirectory() as d:
            for name in ("job.yaml", "metrics.jsonl"):
                shutil.copy(os.path.join(self.run_dir, name), d)
            with open(os.path.join(d, "trace.json"), "w") as f:
                json.dump(trace, f)
            r = ptrain("report", d)
            if r.returncode != 0:
                return r, None
            with open(os.path.join(d, "report.html")) as f:
                return r, f.read()

    def test_the_page_holds_the_run_and_needs_nothing_else(self):
        _, html = self.page()
        self.assertIn("ptrain report: report-test", html)
        for chart in ["Loss", "Learning rate", "Gradient norm", "Tokens per second", "MFU", "Step time", "Memory"]:
            self.assertIn(f'aria-label="{chart}"', html)
        self.assertIn("validate's step", html)  # the job file was found beside the metrics
        self.assertIn('<figure id="measured">', html)
        self.assertIn('<figure id="simulated">', html)
        self.assertRegex(html, r"measured: step 6 \(tp 0, cp 0, dp 0\)")
        # the measured step holds every microbatch's F and B on both stages (4 a stage: dp 2)
        measured = html[html.index('id="measured"'):html.index('id="simulated"')]
        self.assertEqual(len(re.findall(r'class="op"', measured)), 2 * 2 * 4)
        # self-contained: no script, nothing loaded from anywhere
        self.assertNotIn("<script", html)
        self.assertEqual(re.findall(r"(?:src|href)=", html), [])
        self.assertEqual(set(re.findall(r"https?://[^\"' ]+", html)), {"http://www.w3.org/2000/svg"})

    def chromium(self, page, action, height=2000):
        """Headless chromium's `action` (--dump-dom, --screenshot=...) on the file `page`, in a window
        1400 px wide (the page's width) with a profile of its own."""
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is None:
            self.skipTest("chromium is not installed (scripts/setup.sh installs it)")
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                 f"--window-size=1400,{height}", "--force-device-scale-factor=1"]
        with tempfile.TemporaryDirectory() as profile:
            return subprocess.run([browser, *flags, f"--user-data-dir={profile}", action, "file://" + page],
                                  capture_output=True, text=True, timeout=120)

    def test_it_renders_in_headless_chromium(self):
        path, _ = self.page()
        shot = os.path.join(self.run_dir, "shot.png")
        dom = self.chromium(path, "--dump-dom")
        self.assertEqual(dom.returncode, 0, dom.stderr[-2000:])
        # the browser parsed the page into elements: the charts' lines and the timelines' ops
        self.assertGreaterEqual(dom.stdout.count("<polyline"), 5)
        self.assertIn('id="measured"', dom.stdout)
        shot_run = self.chromium(path, f"--screenshot={shot}")
        self.assertEqual(shot_run.returncode, 0, shot_run.stderr[-2000:])
        with open(shot, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(png), 20_000)  # a page of charts, not a blank one

    # Run in a copy of the page (the page itself holds no script): what the browser drew, measured
    # where it drew it, written into the DOM for --dump-dom.
    PROBE = """<script>(function () {
      const facts = {min_font: 1e9, small: [], clipped: [], legend_on_plot: [], timelines: {}};
      const seconds = text => {
        const m = text.trim().match(/^([\\d.]+)(?: (s|ms|us))?$/);
        return m ? parseFloat(m[1]) * {s: 1, ms: 1e-3, us: 1e-6, undefined: 1}[m[2]] : NaN;
      };
      const overlaps = (a, b) => a.left < b.right && a.right > b.left && a.top < b.bottom && a.bottom > b.top;
      for (const svg of document.querySelectorAll("svg")) {
        const box = svg.getBoundingClientRect();
        const name = svg.getAttribute("aria-label") || svg.closest("figure").id;
        for (const t of svg.querySelectorAll("text")) {
          const m = t.getScreenCTM();  // its scale, rotated or not (the y axis's label)
          const size = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
          facts.min_font = Math.min(facts.min_font, size);
          if (size < 10) facts.small.push([name, t.textContent, size]);
          const r = t.getBoundingClientRect();
          if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
            facts.clipped.push([name, t.textContent]);
        }
        const frame = svg.querySelector("rect.frame");
        if (!frame) continue;
        const plot = frame.getBoundingClientRect();
        for (const g of svg.querySelectorAll("g.legend")) {
          const l = g.getBoundingClientRect();
          if (overlaps(l, plot)) facts.legend_on_plot.push([name, g.textContent, "the plot"]);
          for (const line of svg.querySelectorAll("polyline")) {
            const m = line.getScreenCTM();
            for (const p of line.points) {
              const x = m.a * p.x + m.e, y = m.d * p.y + m.f;
              if (x >= l.left && x <= l.right && y >= l.top && y <= l.bottom) facts.legend_on_plot.push([name, g.textContent, "a point"]);
            }
          }
        }
      }
      for (const id of ["measured", "simulated"]) {
        const figure = document.getElementById(id);
        if (!figure) continue;
        const ticks = [...figure.querySelectorAll("text.tick")].map(t => {
          const r = t.getBoundingClientRect();
          return [(r.left + r.right) / 2, seconds(t.textContent)];
        });
        const [first, last] = [ticks[0], ticks[ticks.length - 1]];
        const axis = figure.querySelector("line").getBoundingClientRect().left;
        const ops = [...figure.querySelectorAll("rect.op")].map(r => r.getBoundingClientRect().right);
        facts.timelines[id] = {px_per_s: (last[0] - first[0]) / (last[1] - first[1]), ticks: ticks.length,
                               drawn_px: Math.max(...ops) - axis, width: figure.querySelector("svg").getBoundingClientRect().width};
      }
      const out = document.createElement("pre");
      out.id = "probe";
      out.textContent = JSON.stringify(facts);
      document.body.appendChild(out);
    })();</script>"""

    def test_the_picture_is_readable_and_true(self):
        # Measured in the browser at the page's width (1400 px): no text under 10 px, none outside its
        # drawing, no legend on a plot or a curve, and one time axis for the measured and the
        # simulated step (they were drawn 2,900-3,200 px wide each at its own scale: ~5 px text, a
        # clipped title, a 525 ms step as long as a 181 ms one).
        path, html = self.page()
        probe = os.path.join(self.run_dir, "probe.html")
        with open(probe, "w") as f:
            f.write(html.replace("</body>", self.PROBE + "</body>"))
        dom = self.chromium(probe, "--dump-dom", height=3000)
        self.assertEqual(dom.returncode, 0, dom.stderr[-2000:])
        found = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
        self.assertIsNotNone(found, dom.stdout[-2000:])
        facts = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                           .replace("&amp;", "&"))
        self.assertGreaterEqual(facts["min_font"], 10, facts["small"][:10])
        self.assertEqual(facts["clipped"], [])
        self.assertEqual(facts["legend_on_plot"], [])
        measured, simulated = facts["timelines"]["measured"], facts["timelines"]["simulated"]
        self.assertGreaterEqual(min(measured["ticks"], simulated["ticks"]), 3)
        self.assertAlmostEqual(measured["px_per_s"] / simulated["px_per_s"], 1, delta=0.01)
        self.assertLessEqual(max(measured["width"], simulated["width"]), 1400)
        # each drawn as long as its makespan on that one scale (so the longer step is drawn longer, by
        # the ratio of the two), to a tenth of a pixel
        makespans = [float(m) for m in re.findall(r"(?:measured: step \d+ \(.*?\),|simulated \(validate's costs\):) "
                                                   r"makespan ([\d.e+-]+) s", html)]
        self.assertEqual(len(makespans), 2, html[-3000:])
        for drawing, makespan in zip((measured, simulated), makespans):
            self.assertAlmostEqual(drawing["drawn_px"] / drawing["px_per_s"], makespan,
                                   delta=0.01 * makespan + 0.1 / drawing["px_per_s"])

    def test_a_device_track_is_the_measured_timeline_where_there_is_one(self):
        # A CUDA trace holds every F/B/W twice: where the host issued it (track 0) and where the
        # compute stream ran it (track 2). The page reads the device's, each op once.
        _, host_html = self.page()

        def add_device_track(trace):
            trace["traceEvents"] += [dict(e, tid=2, ts=e["ts"] + 20.0, dur=e["dur"] / 2) for e in trace["traceEvents"]
                                     if e["ph"] == "X" and e["tid"] == 0 and e["name"][:2] in ("F ", "B ", "W ")]
        r, html = self.report_with_trace(add_device_track)
        self.assertEqual(r.returncode, 0, r.stderr)
        measured = html[html.index('id="measured"'):html.index('id="simulated"')]
        self.assertEqual(len(re.findall(r'class="op"', measured)), 2 * 2 * 4)
        makespan = re.compile(r"measured: step 6 \(tp 0, cp 0, dp 0\), makespan ([\d.]+) s")
        self.assertLess(float(makespan.search(html).group(1)), float(makespan.search(host_html).group(1)))

    @staticmethod
    def job_elsewhere(d):
        """A job file in `d` whose metrics go to d/run, and --set overrides for a short one-rank run."""
        job = os.path.join(d, "elsewhere.yaml")
        run_dir = os.path.join(d, "run")
        with open(job, "w") as f:
            f.write(JOB.replace("RUN", run_dir).replace(", trace: " + run_dir + "/trace.json", ""))
        return job, run_dir, ["--set", "train.steps=2", "--set", "parallel.pp=1", "--set", "cluster.gpus_per_node=1"]

    def test_run_keeps_its_job_with_the_overrides_beside_its_metrics(self):
        # A job file elsewhere, changed by --set: `ptrain run` writes RUN_DIR/job.yaml as it trained
        # it, so a bare `ptrain report RUN_DIR` has the predictions. The job file itself is never
        # rewritten: where job.yaml would be it, the overrides are named in a warning.
        with tempfile.TemporaryDirectory() as d:
            job, run_dir, sets = self.job_elsewhere(d)
            r = ptrain("run", job, *sets)
            self.assertEqual(r.returncode, 0, r.stderr)
            recorded = os.path.join(run_dir, "job.yaml")
            with open(recorded) as f:
                text = f.read()
            self.assertTrue(text.startswith("# The job of this run: " + job + " --set train.steps=2"), text)
            r = ptrain("validate", recorded, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["degrees"]["pp"], 1)
            # --nproc against cluster.*: the recorded job has the grid the run had (a run from the
            # beginning writes over no other run's records: the first run's are moved away)
            os.remove(os.path.join(run_dir, "metrics.jsonl"))
            r = ptrain("run", job, *sets, "--nproc", "2", "--set", "checkpoint.dir=null")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = ptrain("validate", recorded, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual((json.loads(r.stdout)["world"], json.loads(r.stdout)["degrees"]["dp"]), (2, 2))
            r = ptrain("report", run_dir)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(run_dir, "report.html")) as f:
                self.assertIn("validate's step", f.read())
            shutil.copy(job, recorded)
            os.remove(os.path.join(run_dir, "metrics.jsonl"))
            r = ptrain("run", recorded, *sets)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("is the job file, so the run's --set overrides are not recorded", r.stderr)
            with open(recorded) as f, open(job) as g:
                self.assertEqual(f.read(), g.read())

    def test_run_replaces_no_job_yaml_it_did_not_write_and_none_when_refused(self):
        # A job.yaml of another origin beside the metrics is left as it is (a warning says so); and a
        # run refused at its checkpoint (another model's) leaves the previous run's record.
        with tempfile.TemporaryDirectory() as d:
            job, run_dir, sets = self.job_elsewhere(d)
            os.makedirs(run_dir)
            recorded = os.path.join(run_dir, "job.yaml")
            with open(recorded, "w") as f:
                f.write("name: somebody else's job\n")
            r = ptrain("run", job, *sets)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(recorded + " was not written by `ptrain run`: not replacing it", r.stderr)
            with open(recorded) as f:
                self.assertEqual(f.read(), "name: somebody else's job\n")
            # a named pipe there is not opened (the run waited in open forever, deaf to SIGTERM)
            os.remove(recorded)
            os.mkfifo(recorded)
            os.remove(os.path.join(run_dir, "metrics.jsonl"))  # another run's records: moved away
            r = ptrain("run", job, *sets)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("cannot write " + recorded + " (a named pipe (FIFO), not a regular file)", r.stderr)
            os.remove(recorded)
            os.remove(os.path.join(run_dir, "metrics.jsonl"))
            ckpt = ["--set", "checkpoint.dir=" + os.path.join(d, "ckpt")]
            r = ptrain("run", job, *sets, *ckpt)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(recorded) as f:
                first = f.read()
            r = ptrain("run", job, *sets, *ckpt, "--set", "train.steps=4", "--set", "model.hidden=64")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("another model", r.stderr)
            with open(recorded) as f:
                self.assertEqual(f.read(), first)

    def test_a_line_break_in_a_set_value_stays_in_the_records_comment(self):
        # The record's first line names the command: a raw line break there ended the comment, and
        # report read the rest as the job (exit 2).
        with tempfile.TemporaryDirectory() as d:
            job, run_dir, sets = self.job_elsewhere(d)
            r = ptrain("run", job, *sets, "--set", 'name="two\n  lines"')
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(run_dir, "job.yaml")) as f:
                self.assertIn('--set name="two\\n  lines"\n# (written by', f.read())
            r = ptrain("report", run_dir)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_run_that_fails_leaves_the_last_trace_whole(self):
        # logging.trace is written at the end; a failed run once left it empty, and report refused it.
        # (A run that resumes continues the records it finds: run_records.h.)
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.yaml")
            with open(job, "w") as f:
                f.write(JOB.replace("RUN", d) + f"checkpoint: {{dir: {d}/ckpt, every: 2}}\n")
            self.assertEqual(ptrain("run", job).returncode, 0)
            with open(os.path.join(d, "trace.json")) as f:
                before = f.read()
            fault = dict(os.environ, OMP_NUM_THREADS="1", PTRAIN_DEBUG_FAULT="1:8:exit")
            r = subprocess.run([PTRAIN, "run", job, "--set", "train.steps=8"], capture_output=True, text=True,
                               timeout=300, env=fault)
            self.assertEqual(r.returncode, 1, r.stderr)
            with open(os.path.join(d, "trace.json")) as f:
                self.assertEqual(f.read(), before)
            self.assertEqual(ptrain("report", d).returncode, 0)
            os.remove(os.path.join(d, "trace.json"))
            r = subprocess.run([PTRAIN, "run", job, "--set", "train.steps=8"], capture_output=True, text=True,
                               timeout=300, env=fault)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "trace.json")))

    def test_without_job_or_trace_the_page_says_what_is_missing(self):
        with tempfile.TemporaryDirectory() as d:
            metrics = os.path.join(d, "m.jsonl")

            def page_of(keep_segments):
                """The page of the run's metrics alone; without their "segment" records: a run's
                before runs recorded the jobs of their segments."""
                with open(os.path.join(self.run_dir, "metrics.jsonl")) as src, open(metrics, "w") as dst:
                    for line in src:
                        row = json.loads(line)
                        if not keep_segments:
                            row.pop("segment", None)
                        dst.write(json.dumps(row) + "\n")
                r = ptrain("report", metrics, "--out", os.path.join(d, "r.html"))
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(os.path.join(d, "r.html")) as f:
                    return f.read()

            html = page_of(keep_segments=False)
            self.assertIn("no job file: no predictions", html)
            self.assertNotIn('<figure id="measured">', html)
            html = page_of(keep_segments=True)  # a run's metrics now carry its job: alone, they predict
            self.assertIn("validate's step", html)
            self.assertIn("each segment's job as the run recorded it", html)

    def test_absurd_figures_keep_the_summary_whole_and_short(self):
        # A metrics file written by hand: %.4f printed 1e308 in 300 digits and cut the summary's
        # table off mid-tag.
        with tempfile.TemporaryDirectory() as d:
            metrics = os.path.join(d, "m.jsonl")
            with open(os.path.join(self.run_dir, "metrics.jsonl")) as src, open(metrics, "w") as dst:
                for line in src:
                    row = json.loads(line)
                    row.update(loss=-1e308, tokens_per_s=1e308, step_s=1e308)
                    dst.write(json.dumps(row) + "\n")
            r = ptrain("report", metrics, "--out", os.path.join(d, "r.html"))
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(d, "r.html")) as f:
                html = f.read()
            summary = html[html.index('<table id="summary">'):html.index("</table>") + len("</table>")]
            self.assertIn("<th>last loss</th><td>-1e+308</td>", summary)
            self.assertIn("<th>median tokens/s</th><td>1e+308</td>", summary)
            self.assertLess(len(summary), 600)

    def test_bad_input_is_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            r = ptrain("report", d)
            self.assertEqual(r.returncode, 2)
            self.assertIn("cannot read the metrics file", r.stderr)
            bad = os.path.join(d, "metrics.jsonl")
            with open(bad, "w") as f:
                f.write('{"step": 1, "loss": 2.0}\nnot json\n')
            r = ptrain("report", bad)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{bad}:2: not a metrics row", r.stderr)
            for row, why in (('{"step": -1}', '"step" must be a whole number'),
                             ('{"step": 1.5}', '"step" must be a whole number'),
                             ('{"step": 1, "loss": "x"}', '"loss" must be a number'),
                             ('{"step": 1, "pipeline_idle": 5.0}', '"pipeline_idle" must be a fraction'),
                             ('{"step": 1, "comm_bytes": "x"}', '"comm_bytes" must be an object'),
                             ('{"step": 1, "comm_s": {"dp": "x"}}', '"comm_s.dp" must be a number')):
                with self.subTest(row):
                    with open(bad, "w") as f:
                        f.write('{"step": 1, "loss": null}\n' + row + "\n")  # null: a NaN the run wrote
                    r = ptrain("report", bad)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn(f"{bad}:2: not a metrics row of `ptrain run` ({why}", r.stderr)
            with open(bad, "w") as f:
                f.write('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": null, "future_field": [1]}\n')
            self.assertEqual(ptrain("report", bad, "--out", os.path.join(d, "r.html")).returncode, 0)
            with open(os.path.join(d, "trace.json"), "w") as f:
                f.write("{")
            with open(bad, "w") as f:
                f.write('{"step": 1, "loss": 2.0}\n')
            r = ptrain("report", d)
            self.assertEqual(r.returncode, 2)
            self.assertIn("is not a Chrome trace", r.stderr)

    def test_the_measured_replica_is_the_one_at_cp_0(self):
        # Ranks label their coordinates with cp: relabel this run's dp 1 ranks as cp 1 of dp 0 (as a
        # cp 2 run names them) and the page still draws the ranks at cp 0, the same step as before.
        _, before = self.page()

        def relabel(trace):
            for e in trace["traceEvents"]:
                if e["ph"] == "M" and e["name"] == "process_name":
                    self.assertIn(", cp 0, dp ", e["args"]["name"])
                    e["args"]["name"] = e["args"]["name"].replace(", cp 0, dp 1,", ", cp 1, dp 0,")
        r, after = self.report_with_trace(relabel)
        self.assertEqual(r.returncode, 0, r.stderr)
        caption = re.compile(r"measured: step 6 \(tp 0, cp 0, dp 0\), makespan [\d.]+ s")
        self.assertEqual(caption.search(after).group(0), caption.search(before).group(0))

    def test_a_trace_of_another_pipeline_has_no_step_of_this_one(self):
        # The trace's stages must be the job's pp ranks 0..pp-1: stages 1 and 2 (a pp 3 run's, say)
        # drew into a third row of a two-row timeline (found by tests/fuzz/fuzz_trace).
        def relabel(trace):
            for e in trace["traceEvents"]:
                if e["ph"] == "M" and e["name"] == "process_name":
                    e["args"]["name"] = e["args"]["name"].replace("(pp 0,", "(pp 2,")
        r, html = self.report_with_trace(relabel)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("The trace holds no step that every pipeline stage recorded.", html)
        self.assertNotIn('id="measured"', html)

    def test_a_trace_with_events_it_does_not_write_is_exit_2(self):
        # Every event is read by type: a wrong one is bad input naming it, never an internal error
        # (exit 1) or a drawing indexed by a negative chunk.
        with open(os.path.join(self.run_dir, "trace.json")) as f:
            good = json.load(f)
        first_op = next(i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "X" and e["name"][:2] == "F ")
        first_step = next(i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "X" and e["name"][:5] == "step ")
        cases = [(first_op, lambda e: 7, "is not an object"),
                 (first_op, lambda e: dict(e, pid="0"), '"pid" is not a whole number'),
                 (first_op, lambda e: dict(e, ts="now"), '"ts" is not a number'),
                 (first_op, lambda e: dict(e, args=dict(e["args"], chunk=-1)), '"chunk" is not a whole number'),
                 (first_op, lambda e: dict(e, args=[1]), '"args" is not an object'),
                 (first_op, lambda e: dict(e, dur=-1.0), '"dur" is not a time from 0 to 1e15 microseconds'),
                 (first_step, lambda e: dict(e, ts=1e308), '"ts" is not a time from 0 to 1e15 microseconds'),
                 (first_step, lambda e: dict(e, name="step x"), 'is named "step x", not "step N"'),
                 (first_step, lambda e: dict(e, name="step 99999999999999999999"), "not \"step N\"")]
        for index, edit, why in cases:
            with self.subTest(why):
                def replace(trace):
                    trace["traceEvents"][index] = edit(trace["traceEvents"][index])
                r, _ = self.report_with_trace(replace)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"is not a trace as logging.trace writes it: traceEvents[{index}] ", r.stderr)
                self.assertIn(why, r.stderr)

class ALongRun(unittest.TestCase):
    """The metrics of a long run: every curve is drawn from at most ~2000 points (10^6 rows drew
    every row: an 81 MB page, 1.2 GB of memory), its first and last points and its extremes kept;
    the file is read a row at a time. 200,000 rows here (29 MB) were a 16 MB page and 225 MB."""
    ROWS = 200_000
    SPIKE = 123_457  # the one row whose loss jumps to 1000

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        metrics = os.path.join(cls.dir.name, "metrics.jsonl")
        row = ('{"step": %d, "loss": %.4f, "lr": 0.0003, "grad_norm": 0.8, "tokens_per_s": %d, "mfu": 0.41, '
               '"step_s": 0.25, "memory_bytes": 1073741824}\n')
        with open(metrics, "w") as f:
            f.writelines(row % (s, 1000.0 if s == cls.SPIKE else 2.0 + (s % 97) / 1000, 30000 + s % 13)
                         for s in range(1, cls.ROWS + 1))
        # the report's peak memory: the most resident of the children of a process that runs only it
        measure = ("import resource, subprocess, sys\n"
                   "r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)\n"
                   "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                   "sys.stderr.write(r.stderr)\n")
        cls.page_path = os.path.join(cls.dir.name, "report.html")
        r = subprocess.run([sys.executable, "-c", measure, PTRAIN, "report", metrics], capture_output=True,
                           text=True, timeout=180)
        cls.stderr = r.stderr
        cls.exit_code, cls.peak_kib = (int(v) for v in r.stdout.split())
        with open(cls.page_path) as f:
            cls.html = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def chart(self, title):
        start = self.html.index(f'aria-label="{title}"')
        return self.html[start:self.html.index("</svg>", start)]

    def test_the_page_is_one_a_browser_opens(self):
        self.assertEqual(self.exit_code, 0, self.stderr)
        self.assertLess(os.path.getsize(self.page_path), 2_000_000)
        for points in re.findall(r'<polyline class="series"[^>]* points="([^"]*)"', self.html):
            self.assertLessEqual(len(points.split()), 2002)

    def test_the_file_is_read_a_row_at_a_time(self):
        self.assertLess(self.peak_kib, 100_000)

    def test_a_spike_of_one_row_is_drawn(self):
        # The loss axis reaches 1000, and the highest point drawn is the spike's, where its step is.
        loss = self.chart("Loss")
        self.assertIn(">1000</text>", loss)
        points = [tuple(map(float, p.split(","))) for p in
                  re.search(r'<polyline class="series"[^>]* points="([^"]*)"', loss).group(1).split()]
        top = min(points, key=lambda p: p[1])
        frame = re.search(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" class="frame"/>', loss)
        plot_left, plot_top, plot_width, plot_height = (float(v) for v in frame.groups())
        self.assertAlmostEqual(top[0], plot_left + (self.SPIKE - 1) / (self.ROWS - 1) * plot_width, delta=0.1)
        self.assertLess(top[1], plot_top + 0.06 * plot_height)  # at the top of the frame (its 5% margin)
        self.assertEqual(sum(1 for p in points if p[1] < 100), 1)  # and nowhere else

    def test_the_summary_is_of_every_row(self):
        summary = self.html[self.html.index('<table id="summary">'):self.html.index("</table>")]
        self.assertIn("<th>steps</th><td>200000</td>", summary)
        self.assertIn("<th>last loss</th><td>2.0830</td>", summary)  # row 200000: 2 + 83/1000
        self.assertIn("<th>median tokens/s</th><td>30006</td>", summary)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import test_script_main
    test_script_main.run(sys.modules[__name__])
