#include "app/run_report.h"

#include <cstdio>

namespace ptrain::app {
namespace {

void line(std::string& out, const char* part, double measured, double predicted) {
  if (measured == 0 && predicted == 0) return;  // an axis the job does not use
  char text[128];
  if (predicted > 0)
    std::snprintf(text, sizeof text, "  %-22s %9.4f s %9.4f s %7.2fx\n", part, measured, predicted, measured / predicted);
  else
    std::snprintf(text, sizeof text, "  %-22s %9.4f s %9.4f s\n", part, measured, predicted);
  out += text;
}

}  // namespace

std::string measured_against_predicted(const train::TypicalStep& measured, const plan::Estimate& predicted) {
  const plan::Estimate::StepBreakdown& p = predicted.breakdown;
  const train::PerAxis comm = measured.comm_s.value_or(train::PerAxis{});
  std::string out = "step time, measured (median of " + std::to_string(measured.steps) +
                    " steps) against predicted (" + predicted.compute_model + "):\n";
  out += "  part                      measured   predicted  measured/predicted\n";
  line(out, "step", measured.step_s, predicted.step_time_s);
  line(out, "compute", measured.compute_s, p.gemm_s + p.attention_s + p.memory_bound_s);
  if (measured.comm_s) {
    line(out, "tp collectives", comm.tp, p.tp_s);
    line(out, "cp collectives", comm.cp, p.cp_s);
    line(out, "ep collectives", comm.ep, p.ep_s);
    line(out, "dp (ZeRO) collectives", comm.dp, p.dp_s);
  }
  if (measured.pipeline_bubble) line(out, "pipeline bubble", measured.pipeline_bubble->seconds, p.bubble_s);
  line(out, "optimizer", measured.optimizer_s, p.optimizer_s);
  if (measured.pipeline_bubble)
    out += "  (bubble: the idle time of the pp rank computing most, pipeline/simulator.h; measured pp rank " +
           std::to_string(measured.pipeline_bubble->rank) + ", predicted pp rank " +
           std::to_string(predicted.bubble_rank) + ")\n";
  return out;
}

}  // namespace ptrain::app
