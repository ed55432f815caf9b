// BF16 staging of CPU op arguments (see bf16_staging.h) and the bulk bf16 <-> f32 conversions.
#include "kernels/cpu/bf16_staging.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

namespace ptrain::kernels::cpu {
namespace {

// Staging blocks outlive the op that used them, in a pool per thread. A fresh allocation of a few
// MB is mapped by malloc and faulted in page by page at every op: on a bf16 GPT-2 with its 50,257-row
// head on one CPU thread a third of the step went to page faults, and widening into the fresh pages
// took another third (perf, 2026-12-07). The pool hands out the smallest free block that holds a
// request (else a new one) and keeps at most kKept blocks, dropping the smallest, so what it holds
// is bounded by the largest ops' staging, which every step allocated anyway.
class BlockPool {
 public:
  using Block = Bf16Staging::Block;
  Block take(std::int64_t count) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity >= count && (best == free_.end() || it->capacity < best->capacity)) best = it;
    if (best == free_.end())
      return {std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(count)), count};
    Block b = std::move(*best);
    free_.erase(best);
    return b;
  }
  void give(Block b) {
    free_.push_back(std::move(b));
    if (free_.size() <= kKept) return;
    free_.erase(std::min_element(free_.begin(), free_.end(),
                                 [](const Block& x, const Block& y) { return x.capacity < y.capacity; }));
  }

 private:
  static constexpr std::size_t kKept = 8;
  std::vector<Block> free_;
};

BlockPool& thread_pool() {
  thread_local BlockPool pool;
  return pool;
}

}  // namespace

void widen_bf16(float* dst, const std::uint16_t* src, std::int64_t n) {
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t len) {
#pragma omp simd
    for (std::int64_t i = begin; i < begin + len; ++i) dst[i] = bf16_to_f32(src[i]);
  });
}

void round_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  parallel_chunks(n, [&](std::int64_t begin, std::int64_t len) {
#pragma omp simd
    for (std::int64_t i = begin; i < begin + len; ++i) dst[i] = f32_to_bf16(src[i]);
  });
}

Bf16Staging::~Bf16Staging() {
  for (const WriteBack& w : write_backs_) round_to_bf16(w.target, w.staged, w.count);
  for (Block& b : temporaries_) thread_pool().give(std::move(b));
}

Buf Bf16Staging::input(Buf b, std::int64_t count) {
  return stage(b, count, false);
}

Buf Bf16Staging::output(Buf b, std::int64_t count) {
  return stage(b, count, true);
}

Bf16Staging::Rows Bf16Staging::input_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len) {
  return stage_rows(table, ids, n, row_len, false);
}

Bf16Staging::Rows Bf16Staging::output_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len) {
  return stage_rows(table, ids, n, row_len, true);
}

float* Bf16Staging::temporary(std::int64_t count) {
  return temporaries_.emplace_back(thread_pool().take(count)).data.get();
}

Buf Bf16Staging::stage(Buf b, std::int64_t count, bool written) {
  if (!b || b.dtype != DType::BF16) return b;
  float* f = temporary(count);
  widen_bf16(f, b.as<const std::uint16_t>(), count);
  if (written) write_backs_.push_back({b.as<std::uint16_t>(), f, count});
  return Buf{f, DType::F32};
}

Bf16Staging::Rows Bf16Staging::stage_rows(Buf table, Buf ids, std::int64_t n, std::int64_t row_len,
                                          bool written) {
  if (!table || table.dtype != DType::BF16) return {table, ids};
  const std::int32_t* id = ci32(ids);
  std::vector<std::int32_t> rows;  // the rows that occur, ascending (kRowElsewhere is no row)
  std::copy_if(id, id + n, std::back_inserter(rows), [](std::int32_t i) { return i != kRowElsewhere; });
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::int32_t* renumbered =
      renumbered_ids_
          .emplace_back(std::make_unique_for_overwrite<std::int32_t[]>(static_cast<std::size_t>(n)))
          .get();
  for (std::int64_t i = 0; i < n; ++i) {
    renumbered[i] =
        id[i] == kRowElsewhere
            ? kRowElsewhere
            : static_cast<std::int32_t>(std::lower_bound(rows.begin(), rows.end(), id[i]) - rows.begin());
  }
  float* staged = temporary(static_cast<std::int64_t>(rows.size()) * row_len);
  auto* bits = table.as<std::uint16_t>();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::uint16_t* row = bits + std::int64_t{rows[r]} * row_len;
    float* staged_row = staged + static_cast<std::int64_t>(r) * row_len;
    widen_bf16(staged_row, row, row_len);
    if (written) write_backs_.push_back({row, staged_row, row_len});
  }
  return {Buf{staged, DType::F32}, Buf{renumbered, DType::I32}};
}

}  // namespace ptrain::kernels::cpu
