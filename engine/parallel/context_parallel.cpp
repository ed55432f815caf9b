#include "engine/parallel/context_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/runtime/owned_buffer.h"

namespace ptrain::parallel {
namespace {

std::size_t bytes_of(kernels::Buf b, std::int64_t elements) {
  return static_cast<std::size_t>(elements) * kernels::dtype_size(b.dtype);
}

}  // namespace

ContextParallel::ContextParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& cp,
                                 int micro_batch, int seq_len)
    : comm_(comm),
      memory_(memory),
      cp_(cp),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      chunk_len_(seq_len / (2 * cp.size())),
      staged_(memory, comm) {
  if (!cp.has_me()) throw std::invalid_argument("ContextParallel: this rank is not in cp group " + cp.name);
  if (micro_batch < 1 || seq_len < 1 || seq_len % (2 * cp.size()) != 0)
    throw std::invalid_argument("ContextParallel: seq_len " + std::to_string(seq_len) +
                                " must be a positive multiple of 2 * cp = " + std::to_string(2 * cp.size()));
}

void ContextParallel::take_chunks(const std::int32_t* batch, std::int32_t* mine) const {
  for (int j = 0; j < 2; ++j)
    for (int b = 0; b < micro_batch_; ++b) {
      const std::int32_t* from = batch + static_cast<std::ptrdiff_t>(b) * seq_len_ + chunk_start(j);
      std::int32_t* to = mine + (static_cast<std::ptrdiff_t>(j) * micro_batch_ + b) * chunk_len_;
      std::copy(from, from + chunk_len_, to);
    }
}

void ContextParallel::permute(kernels::Buf a_full, kernels::Buf b_full, kernels::Buf staging, int cols,
                              Direction dir) const {
  const std::int64_t piece = static_cast<std::int64_t>(chunk_len_) * cols;  // one chunk of one sequence
  std::int64_t s = 0;                                                       // staging's rank order
  for (int r = 0; r < size(); ++r)
    for (kernels::Buf full : {a_full, b_full})
      for (int j = 0; j < 2; ++j)
        for (int b = 0; b < micro_batch_; ++b, s += piece) {
          const kernels::Buf in_sequence = runtime::advance(
              full, (static_cast<std::int64_t>(b) * seq_len_ + chunk_of(r, j) * chunk_len_) * cols);
          const kernels::Buf in_staging = runtime::advance(staging, s);
          if (dir == Direction::ToStaging)
            memory_.copy(in_staging, in_sequence, bytes_of(staging, piece));
          else
            memory_.copy(in_sequence, in_staging, bytes_of(staging, piece));
        }
}

void ContextParallel::collective(kernels::Buf staging, std::int64_t chunk, bool gather) {
  staged_.run(cp_, staging.ptr, bytes_of(staging, chunk * size()), [&](void* p) {
    if (gather)
      comm_.all_gather(cp_, p, static_cast<std::size_t>(chunk), comm_type(staging.dtype));
    else
      comm_.reduce_scatter(cp_, p, static_cast<std::size_t>(chunk), comm_type(staging.dtype));
  });
}

void ContextParallel::gather_sequences(kernels::Buf a, kernels::Buf b, kernels::Buf a_full,
                                       kernels::Buf b_full, kernels::Buf staging, int cols) {
  const std::int64_t mine = 2LL * micro_batch_ * chunk_len_ * cols;  // one tensor's rows on this rank
  memory_.copy(runtime::advance(staging, 2 * mine * rank()), a, bytes_of(staging, mine));
  memory_.copy(runtime::advance(staging, 2 * mine * rank() + mine), b, bytes_of(staging, mine));
  collective(staging, 2 * mine, true);
  permute(a_full, b_full, staging, cols, Direction::FromStaging);
}

void ContextParallel::sum_into_chunks(kernels::Buf a_full, kernels::Buf b_full, kernels::Buf a,
                                      kernels::Buf b, kernels::Buf staging, int cols) {
  const std::int64_t mine = 2LL * micro_batch_ * chunk_len_ * cols;
  permute(a_full, b_full, staging, cols, Direction::ToStaging);
  collective(staging, 2 * mine, false);
  memory_.copy(a, runtime::advance(staging, 2 * mine * rank()), bytes_of(staging, mine));
  memory_.copy(b, runtime::advance(staging, 2 * mine * rank() + mine), bytes_of(staging, mine));
}

}  // namespace ptrain::parallel
