#include "engine/config/job_spec.h"

namespace ptrain::config {

// Each switch lists every enumerator; the trailing return only answers a value cast from garbage.

const char* to_string(Backend v) {
  switch (v) {
    case Backend::Auto:
      return "auto";
    case Backend::Cpu:
      return "cpu";
    case Backend::Cuda:
      return "cuda";
  }
  return "?";
}

const char* to_string(Arch v) {
  switch (v) {
    case Arch::Gpt2:
      return "gpt2";
    case Arch::Llama:
      return "llama";
    case Arch::Mixtral:
      return "mixtral";
  }
  return "?";
}

const char* to_string(ScheduleKind v) {
  switch (v) {
    case ScheduleKind::Gpipe:
      return "gpipe";
    case ScheduleKind::OneFOneB:
      return "1f1b";
    case ScheduleKind::Interleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::ZbH1:
      return "zb-h1";
    case ScheduleKind::Zbv:
      return "zbv";
    case ScheduleKind::DualPipeV:
      return "dualpipev";
  }
  return "?";
}

bool splits_weight_grad(ScheduleKind v) {
  return v == ScheduleKind::ZbH1 || v == ScheduleKind::Zbv || v == ScheduleKind::DualPipeV;
}

int most_zero_stage(ScheduleKind kind, int pp, bool tie_embeddings) {
  return splits_weight_grad(kind) || (pp > 1 && tie_embeddings) ? 1 : 3;
}

bool caps_in_flight(ScheduleKind v) {
  return v == ScheduleKind::OneFOneB || v == ScheduleKind::Interleaved1F1B;
}

int least_microbatches(ScheduleKind kind, int pp) {
  switch (kind) {
    case ScheduleKind::OneFOneB:
    case ScheduleKind::ZbH1:
    case ScheduleKind::Zbv:
      return pp;
    case ScheduleKind::DualPipeV:
      return 2 * pp;
    case ScheduleKind::Gpipe:
    case ScheduleKind::Interleaved1F1B:
      return 1;
  }
  return 1;
}

int least_in_flight(int pp, int vpp) {
  const std::int64_t chunks = static_cast<std::int64_t>(vpp - 1) * pp + 1;
  return static_cast<int>((chunks + vpp - 1) / vpp);
}

const char* to_string(Precision v) {
  switch (v) {
    case Precision::Fp32:
      return "fp32";
    case Precision::Bf16:
      return "bf16";
    case Precision::Fp8:
      return "fp8";
  }
  return "?";
}

const char* to_string(Fp8Scaling v) {
  switch (v) {
    case Fp8Scaling::Current:
      return "current";
    case Fp8Scaling::Delayed:
      return "delayed";
  }
  return "?";
}

const char* to_string(Recompute v) {
  switch (v) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

const char* to_string(CpComm v) {
  switch (v) {
    case CpComm::Allgather:
      return "allgather";
    case CpComm::Ring:
      return "ring";
    case CpComm::A2a:
      return "a2a";
  }
  return "?";
}

const char* to_string(Offload v) {
  switch (v) {
    case Offload::None:
      return "none";
    case Offload::Optimizer:
      return "optimizer";
  }
  return "?";
}

const char* to_string(OptimizerKind v) {
  switch (v) {
    case OptimizerKind::AdamW:
      return "adamw";
  }
  return "?";
}

const char* to_string(LrDecay v) {
  switch (v) {
    case LrDecay::Cosine:
      return "cosine";
    case LrDecay::Linear:
      return "linear";
    case LrDecay::Constant:
      return "constant";
    case LrDecay::Wsd:
      return "wsd";
  }
  return "?";
}

const char* to_string(DataFormat v) {
  switch (v) {
    case DataFormat::Llmc:
      return "llmc";
    case DataFormat::Megatron:
      return "megatron";
    case DataFormat::Synthetic:
      return "synthetic";
  }
  return "?";
}

const char* to_string(Resume v) {
  switch (v) {
    case Resume::Auto:
      return "auto";
    case Resume::Never:
      return "never";
  }
  return "?";
}

}  // namespace ptrain::config
