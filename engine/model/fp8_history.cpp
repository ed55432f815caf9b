#include "engine/model/fp8_history.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ptrain::model {

int fp8_expert_linear_index(int expert, Fp8Linear which) {
  constexpr int kAttention = 4;
  switch (which) {
    case Fp8Linear::Gate: return kAttention + 3 * expert;
    case Fp8Linear::Up: return kAttention + 3 * expert + 1;
    case Fp8Linear::Down: return kAttention + 3 * expert + 2;
    default: throw std::invalid_argument("fp8_expert_linear_index: an expert has gate, up and down only");
  }
}

Fp8History::Fp8History(const kernels::Ops& ops, int layers, int linears, int length)
    : ops_(ops),
      layers_(layers),
      linears_(linears),
      length_(length),
      history_(static_cast<std::size_t>(casts() * length), 0.0f),
      scale_(ops, casts(), kernels::DType::F32),
      record_(ops, casts(), kernels::DType::F32) {
  if (layers < 1 || linears < 1 || length < 1)
    throw std::invalid_argument("Fp8History: layers, linears and length must be positive");
}

Fp8LinearAmaxes Fp8History::linear(int layer, int index) const {
  const std::int64_t first = (static_cast<std::int64_t>(layer) * linears_ + index) * kFp8Operands;
  return {scale_.at(first), record_.at(first)};
}

void Fp8History::end_step(const MaxOverRanks& max_over_ranks) {
  const std::int64_t n = casts();
  std::vector<float> step(static_cast<std::size_t>(n));
  ops_.copy_to_host(step.data(), record_.at(), record_.bytes());
  max_over_ranks(step.data(), n);
  for (std::int64_t c = 0; c < n; ++c) {
    float* h = history_.data() + c * length_;
    std::copy_backward(h, h + length_ - 1, h + length_);
    h[0] = std::isfinite(step[static_cast<std::size_t>(c)]) ? step[static_cast<std::size_t>(c)] : 0.0f;
  }
  filled_ = true;
  upload_scales();
  discard_step();
}

void Fp8History::discard_step() {
  ops_.fill(record_.at(), 0.0f, casts());
}

void Fp8History::restore(const std::vector<float>& saved, std::int64_t saved_length) {
  if (saved_length < 1 || static_cast<std::int64_t>(saved.size()) != casts() * saved_length)
    throw std::invalid_argument("Fp8History::restore: " + std::to_string(saved.size()) + " values for " +
                                std::to_string(casts()) + " histories of " + std::to_string(saved_length));
  const std::int64_t kept = std::min<std::int64_t>(saved_length, length_);
  std::fill(history_.begin(), history_.end(), 0.0f);
  for (std::int64_t c = 0; c < casts(); ++c)
    std::copy_n(saved.begin() + c * saved_length, kept, history_.begin() + c * length_);
  filled_ = true;
  upload_scales();
  discard_step();
}

void Fp8History::upload_scales() {
  std::vector<float> scale(static_cast<std::size_t>(casts()));
  for (std::size_t c = 0; c < scale.size(); ++c) {
    const auto h = history_.begin() + static_cast<std::ptrdiff_t>(c * static_cast<std::size_t>(length_));
    scale[c] = *std::max_element(h, h + length_);
  }
  ops_.copy_to_device(scale_.at(), scale.data(), scale_.bytes());
}

}  // namespace ptrain::model
