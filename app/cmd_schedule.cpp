// `ptrain schedule job.yaml [--svg FILE] [--trace FILE]`: draws the pipeline schedule the engine
// executes (the same pipeline::build instruction lists), timed with the plan's per-stage costs.
#include <cstdio>
#include <optional>

#include "app/commands.h"
#include "app/exit_codes.h"
#include "app/flag_checks.h"
#include "app/output_file.h"
#include "app/job_loading.h"
#include "engine/config/rules.h"
#include "engine/pipeline/checker.h"
#include "engine/pipeline/render.h"
#include "engine/pipeline/schedule.h"
#include "engine/pipeline/simulator.h"
#include "engine/plan/hardware.h"
#include "engine/plan/step_time.h"

namespace ptrain::app {
namespace {

struct ScheduleArgs {
  JobArgs job;
  std::optional<int> world;
  std::string svg_path;
  std::string trace_path;
  int width = 160;
};

bool write_file(const std::string& path, const std::string& text) {
  if (!write_output_file(path, text)) return false;
  std::fprintf(stderr, "wrote %s\n", path.c_str());
  return true;
}

int run_schedule(const ScheduleArgs& args) {
  if (!args.svg_path.empty() && args.svg_path == args.trace_path) {
    std::fprintf(stderr, "error: --svg and --trace both name %s: one would overwrite the other\n",
                 args.svg_path.c_str());
    return kExitBadInput;
  }
  for (const auto& [flag, path] : {std::pair{"--svg", args.svg_path}, std::pair{"--trace", args.trace_path}})
    if (!path.empty() && (refuse_output_over_input(flag, path, {{"the job file", args.job.job_path}}) ||
                          refuse_unwritable_output(flag, path)))
      return kExitBadInput;
  config::LoadResult job = load_job(args.job, args.world);
  const std::optional<plan::HardwareProfile> hw =
      job.ok() ? find_job_hardware(job) : std::optional<plan::HardwareProfile>();
  print_diagnostics(job.diags);
  if (!job.ok()) return kExitBadInput;

  const config::JobSpec& spec = job.spec;
  const pipeline::Schedule schedule = pipeline::build(spec, spec.train.microbatches);
  if (const auto problems = pipeline::check(schedule); !problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "internal error: schedule check: %s\n", p.c_str());
    return kExitRuntimeFailure;
  }
  const pipeline::SimResult sim = pipeline::simulate(schedule, plan::stage_op_costs(spec, *hw));
  std::printf("%s", pipeline::render_ascii(schedule, sim, args.width).c_str());
  bool ok = true;
  if (!args.svg_path.empty()) ok = write_file(args.svg_path, pipeline::render_svg(schedule, sim)) && ok;
  if (!args.trace_path.empty()) ok = write_file(args.trace_path, pipeline::render_chrome_trace(schedule, sim)) && ok;
  return ok ? kExitOk : kExitRuntimeFailure;
}

}  // namespace

void add_schedule_command(CLI::App& cli, int& exit_code) {
  auto args = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "schedule",
      "Draw the pipeline schedule the engine will execute: one row per pipeline stage in the terminal,\n"
      "optionally SVG (--svg) and Chrome trace JSON (--trace, open in chrome://tracing or Perfetto).");
  add_job_args(*cmd, args->job);
  cmd->add_option("--world", args->world, "Number of ranks (default: cluster.nodes * gpus_per_node)")
      ->check(whole_number_in(1, config::kMaxWorld));
  cmd->add_option("--svg", args->svg_path, "Write the timeline as SVG to this file")->check(non_empty());
  cmd->add_option("--trace", args->trace_path, "Write the timeline as Chrome trace JSON to this file")
      ->check(non_empty());
  cmd->add_option("--width", args->width, "Terminal width of the drawing")->check(whole_number_in(40, 100000));
  cmd->callback([args, &exit_code] { exit_code = run_schedule(*args); });
}

}  // namespace ptrain::app
