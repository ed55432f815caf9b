#include "engine/train/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "engine/ckpt/crc32c.h"
#include "tensorboard_event.pb.h"

namespace ptrain::train {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("host");
}

}  // namespace

std::uint32_t tfrecord_masked_crc(const void* data, std::size_t size) {
  const std::uint32_t crc = ckpt::crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> v;
  for (const StepScalar& f : step_scalars())
    if (const std::optional<double> value = f.value(m)) v.emplace_back(f.tag, *value);
  if (!m.comm_bytes) return v;
  for (const AxisField& axis : kAxes) {  // the axes that sent bytes in the step
    if ((*m.comm_bytes).*axis.member <= 0) continue;
    for (const StepPerAxis& f : step_per_axis())
      if (const std::optional<PerAxis>& a = m.*f.member)
        v.emplace_back(f.tag_prefix + std::string(axis.name), (*a).*axis.member);
  }
  return v;
}

TensorBoardLog::TensorBoardLog(const std::string& dir) {
  const auto seconds = static_cast<long long>(unix_seconds());
  const std::string name =
      "events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." + std::to_string(::getpid());
  out_ = std::make_unique<RecordFile>("logging.tensorboard", (std::filesystem::path(dir) / name).string());
  tensorboard::Event first;
  first.set_wall_time(unix_seconds());
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString(), "the file's first event (its version)");
}

void TensorBoardLog::mark_restart(std::int64_t step, const std::string& message) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::SessionLog* log = event.mutable_session_log();
  log->set_status(tensorboard::SessionLog::START);
  log->set_msg(message);
  write_record(event.SerializeAsString(), "the restart marker of step " + std::to_string(step));
}

void TensorBoardLog::record(const StepMetrics& m) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(m.step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : tensorboard_scalars(m)) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString(), "the event of step " + std::to_string(m.step));
}

void TensorBoardLog::write_record(const std::string& bytes, const std::string& what) {
  const std::uint64_t length = bytes.size();  // little-endian on every host ptrain builds for
  unsigned char header[12];
  std::memcpy(header, &length, 8);
  const std::uint32_t length_crc = tfrecord_masked_crc(header, 8), data_crc = tfrecord_masked_crc(bytes.data(), bytes.size());
  std::memcpy(header + 8, &length_crc, 4);
  std::string frame(reinterpret_cast<const char*>(header), sizeof header);
  frame += bytes;
  frame.append(reinterpret_cast<const char*>(&data_crc), 4);
  out_->append(frame, what);
}

}  // namespace ptrain::train
