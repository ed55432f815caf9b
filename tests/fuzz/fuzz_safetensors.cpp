// libFuzzer target: arbitrary bytes as a safetensors file. The reader must either accept them or
// throw ckpt::CheckpointError; anything else (another exception, a crash, a sanitizer report, an
// out-of-bounds read of the data section) is a bug. Accepted files are read back in full.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/ckpt/checkpoint_error.h"
#include "engine/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const ptrain::ckpt::StHeader header = ptrain::ckpt::parse_safetensors(file, "fuzz.safetensors");
    // Touch every byte every tensor claims, as a loader would.
    volatile std::uint8_t sink = 0;
    for (const ptrain::ckpt::StTensorInfo& t : header.tensors) {
      for (std::int64_t i = t.begin; i < t.end; ++i)
        sink = sink ^ data[static_cast<std::size_t>(header.data_start + i)];
    }
    for (const auto& [key, value] : header.metadata)
      sink = sink ^ static_cast<std::uint8_t>(key.size() + value.size());
  } catch (const ptrain::ckpt::CheckpointError&) {
  }
  return 0;
}
