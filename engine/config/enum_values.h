// Every value of each job_spec.h enum, in the order choices are listed to the user. Parsing an enum
// key compares the YAML text with to_string(value), so the spelling lives only in job_spec.cpp.
#pragma once

#include <array>

#include "engine/config/job_spec.h"

namespace ptrain::config {

template <class E>
struct EnumValues;

template <>
struct EnumValues<Backend> {
  static constexpr std::array values{Backend::Auto, Backend::Cpu, Backend::Cuda};
};
template <>
struct EnumValues<Arch> {
  static constexpr std::array values{Arch::Gpt2, Arch::Llama, Arch::Mixtral};
};
template <>
struct EnumValues<ScheduleKind> {
  static constexpr std::array values{ScheduleKind::Gpipe, ScheduleKind::OneFOneB,
                                     ScheduleKind::Interleaved1F1B, ScheduleKind::ZbH1,
                                     ScheduleKind::Zbv,             ScheduleKind::DualPipeV};
};
template <>
struct EnumValues<Precision> {
  static constexpr std::array values{Precision::Fp32, Precision::Bf16, Precision::Fp8};
};
template <>
struct EnumValues<Fp8Scaling> {
  static constexpr std::array values{Fp8Scaling::Current, Fp8Scaling::Delayed};
};
template <>
struct EnumValues<Recompute> {
  static constexpr std::array values{Recompute::None, Recompute::Selective, Recompute::Full};
};
template <>
struct EnumValues<CpComm> {
  static constexpr std::array values{CpComm::Allgather, CpComm::Ring, CpComm::A2a};
};
template <>
struct EnumValues<Offload> {
  static constexpr std::array values{Offload::None, Offload::Optimizer};
};
template <>
struct EnumValues<OptimizerKind> {
  static constexpr std::array values{OptimizerKind::AdamW};
};
template <>
struct EnumValues<LrDecay> {
  static constexpr std::array values{LrDecay::Cosine, LrDecay::Linear, LrDecay::Constant, LrDecay::Wsd};
};
template <>
struct EnumValues<DataFormat> {
  static constexpr std::array values{DataFormat::Llmc, DataFormat::Megatron, DataFormat::Synthetic};
};
template <>
struct EnumValues<Resume> {
  static constexpr std::array values{Resume::Auto, Resume::Never};
};

}  // namespace ptrain::config
