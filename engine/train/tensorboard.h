// logging.tensorboard: each step's metrics as TensorBoard scalars, in an event file of the
// directory (events.out.tfevents.<seconds>.<host>, one per run; a resumed run adds its own, which
// starts with TensorBoard's restart marker, and TensorBoard reads them together). The file is TFRecord-framed protobuf: per record the length
// (8 bytes little-endian), its masked CRC32C, the serialized Event, its masked CRC32C. Written
// every step, a record whole or not at all (RecordFile), so TensorBoard can follow a run live.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/train/metrics.h"
#include "engine/train/record_file.h"

namespace ptrain::train {

class TensorBoardLog {
 public:
  // Makes `dir` and opens a new event file in it; throws std::invalid_argument naming
  // logging.tensorboard when it cannot.
  explicit TensorBoardLog(const std::string& dir);
  // TensorBoard's restart marker, for a run that continues the directory's events after a resume:
  // a SessionLog START at `step` (the first step of this run), with `message`. TensorBoard then
  // drops the earlier files' events from `step` on, which this run trains again.
  void mark_restart(std::int64_t step, const std::string& message);
  // One Event for step m.step with every scalar the step has (tags in tensorboard_scalars());
  // RecordWriteError when it cannot be written.
  void record(const StepMetrics& m);
  RecordFile& file() { return *out_; }

 private:
  void write_record(const std::string& bytes, const std::string& what);
  std::unique_ptr<RecordFile> out_;
};

// The (tag, value) pairs of a step: every scalar of step_scalars() the step has, and per axis that
// sent bytes in the step those of step_per_axis() (tag_prefix + axis).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m);

// TFRecord's masked CRC32C of `data` (the CRC rotated right by 15 bits plus 0xa282ead8).
std::uint32_t tfrecord_masked_crc(const void* data, std::size_t size);

}  // namespace ptrain::train
