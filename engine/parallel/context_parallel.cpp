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
                                 int micro_batch, int seq_len, config::CpComm mode, std::size_t ring_message_bytes)
    : comm_(comm),
      memory_(memory),
      cp_(cp),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      chunk_len_(seq_len / (2 * cp.size())),
      mode_(mode),
      staged_(memory, comm) {
  if (!cp.has_me()) throw std::invalid_argument("ContextParallel: this rank is not in cp group " + cp.name);
  if (micro_batch < 1 || seq_len < 1 || seq_len % (2 * cp.size()) != 0)
    throw std::invalid_argument("ContextParallel: seq_len " + std::to_string(seq_len) +
                                " must be a positive multiple of 2 * cp = " + std::to_string(2 * cp.size()));
  if (mode == config::CpComm::Ring && cp.size() > 1) {
    std::vector<dist::Comm::Channel> ring;
    for (int r = 0; r < cp.size(); ++r) ring.push_back({r, (r + 1) % cp.size(), 0});
    comm.open_channels(cp, ring, ring_message_bytes);
  }
}

void ContextParallel::take_chunks(const std::int32_t* batch, std::int32_t* mine) const {
  for (int j = 0; j < 2; ++j)
    for (int b = 0; b < micro_batch_; ++b) {
      const std::int32_t* from = batch + static_cast<std::ptrdiff_t>(b) * seq_len_ + chunk_start(j);
      std::int32_t* to = mine + (static_cast<std::ptrdiff_t>(j) * micro_batch_ + b) * chunk_len_;
      std::copy(from, from + chunk_len_, to);
    }
}

void ContextParallel::copy_chunks(kernels::Buf full, kernels::Buf rows, int r, int cols, bool to_rows) const {
  const std::size_t es = kernels::dtype_size(full.dtype);
  const std::size_t chunk = static_cast<std::size_t>(chunk_len_) * cols * es;  // one sequence's chunk
  const std::size_t sequence = static_cast<std::size_t>(seq_len_) * cols * es;
  for (int j = 0; j < 2; ++j) {
    const kernels::Buf in_rows = runtime::advance(rows, static_cast<std::int64_t>(j) * micro_batch_ * chunk / es);
    const kernels::Buf in_full = runtime::advance(full, static_cast<std::int64_t>(chunk_start(r, j)) * cols);
    const auto B = static_cast<std::size_t>(micro_batch_);
    if (to_rows)
      memory_.copy_rows(in_rows, chunk, in_full, sequence, chunk, B);
    else
      memory_.copy_rows(in_full, sequence, in_rows, chunk, chunk, B);
  }
}

void ContextParallel::take_rows(kernels::Buf full, kernels::Buf mine, int cols) const {
  copy_chunks(full, mine, rank(), cols, true);
}

void ContextParallel::place_rows(kernels::Buf mine, kernels::Buf full, int cols) const {
  copy_chunks(full, mine, rank(), cols, false);
}

void ContextParallel::permute(const std::vector<kernels::Buf>& full, kernels::Buf staging, int cols,
                              Direction dir) const {
  const std::int64_t mine = 2LL * micro_batch_ * chunk_len_ * cols;  // one tensor's rows of one rank
  std::int64_t s = 0;                                                // staging's rank order
  for (int r = 0; r < size(); ++r)
    for (const kernels::Buf& f : full) {
      copy_chunks(f, runtime::advance(staging, s), r, cols, dir == Direction::ToStaging);
      s += mine;
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

void ContextParallel::gather_sequences(const std::vector<kernels::Buf>& mine, const std::vector<kernels::Buf>& full,
                                       kernels::Buf staging, int cols) {
  const std::int64_t rows = 2LL * micro_batch_ * chunk_len_ * cols;  // one tensor's rows on this rank
  const auto n = static_cast<std::int64_t>(mine.size());
  for (std::int64_t i = 0; i < n; ++i)
    memory_.copy(runtime::advance(staging, rows * (n * rank() + i)), mine[static_cast<std::size_t>(i)],
                 bytes_of(staging, rows));
  collective(staging, n * rows, true);
  permute(full, staging, cols, Direction::FromStaging);
}

void ContextParallel::sum_into_chunks(const std::vector<kernels::Buf>& full, const std::vector<kernels::Buf>& mine,
                                      kernels::Buf staging, int cols) {
  const std::int64_t rows = 2LL * micro_batch_ * chunk_len_ * cols;
  const auto n = static_cast<std::int64_t>(mine.size());
  permute(full, staging, cols, Direction::ToStaging);
  collective(staging, n * rows, false);
  for (std::int64_t i = 0; i < n; ++i)
    memory_.copy(mine[static_cast<std::size_t>(i)], runtime::advance(staging, rows * (n * rank() + i)),
                 bytes_of(staging, rows));
}

std::vector<ContextParallel::RingBlock> ContextParallel::ring_blocks(int step) const {
  std::vector<RingBlock> blocks;
  const int source = ring_source(step);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int behind = chunk_of(rank(), i) - chunk_of(source, j);  // chunks between keys and queries
      if (behind >= 0) blocks.push_back({i, j, behind * chunk_len_});
    }
  return blocks;
}

void ContextParallel::send_to_next(kernels::Buf data, std::size_t bytes) {
  staged_.send(comm_, cp_, data, bytes, (rank() + 1) % size());
}

void ContextParallel::receive_from_previous(kernels::Buf into, std::size_t bytes) {
  staged_.recv(comm_, cp_, into, bytes, (rank() + size() - 1) % size());
}

void ContextParallel::finish_sends() { staged_.finish_sends(); }

void ContextParallel::to_heads(const std::vector<HeadSplit>& tensors, int head_dim, kernels::Buf send,
                               kernels::Buf recv) {
  const std::int64_t n = 2LL * micro_batch_ * chunk_len_;  // this rank's rows
  std::int64_t block = 0;
  for (const HeadSplit& t : tensors) block += n * t.per_rank * head_dim;
  const std::size_t es = kernels::dtype_size(send.dtype);
  for (int p = 0; p < size(); ++p) {  // rank p's heads of this rank's rows
    std::int64_t at = p * block;
    for (const HeadSplit& t : tensors) {
      const std::size_t width = static_cast<std::size_t>(t.per_rank) * head_dim * es;
      memory_.copy_rows(runtime::advance(send, at), width,
                        runtime::advance(t.sequence, static_cast<std::int64_t>(t.first(p)) * head_dim),
                        static_cast<std::size_t>(t.all_heads) * head_dim * es, width, static_cast<std::size_t>(n));
      at += n * t.per_rank * head_dim;
    }
  }
  staged_.all_to_all(comm_, cp_, send, recv, block);
  for (int r = 0; r < size(); ++r) {  // rank r's rows of this rank's heads
    std::int64_t at = r * block;
    for (const HeadSplit& t : tensors) {
      copy_chunks(t.heads, runtime::advance(recv, at), r, t.per_rank * head_dim, false);
      at += n * t.per_rank * head_dim;
    }
  }
}

void ContextParallel::to_sequence(const std::vector<HeadSplit>& tensors, int head_dim, kernels::Buf send,
                                  kernels::Buf recv) {
  const std::int64_t n = 2LL * micro_batch_ * chunk_len_;
  std::int64_t block = 0;
  for (const HeadSplit& t : tensors) block += n * t.per_rank * head_dim;
  const std::size_t es = kernels::dtype_size(send.dtype);
  for (int r = 0; r < size(); ++r) {
    std::int64_t at = r * block;
    for (const HeadSplit& t : tensors) {
      copy_chunks(t.heads, runtime::advance(send, at), r, t.per_rank * head_dim, true);
      at += n * t.per_rank * head_dim;
    }
  }
  staged_.all_to_all(comm_, cp_, send, recv, block);
  std::int64_t offset = 0;  // of the tensor within a rank's block
  for (const HeadSplit& t : tensors) {
    const std::int64_t part = n * t.per_rank * head_dim;
    const std::size_t width = static_cast<std::size_t>(t.per_rank) * head_dim * es;
    for (int p = 0; p < size(); ++p) {
      // Copies of one kv head (ranks p0 .. with the same first head) are summed into the first's.
      int p0 = p;
      while (p0 > 0 && t.first(p0 - 1) == t.first(p)) --p0;
      const kernels::Buf sum = runtime::advance(recv, p0 * block + offset);
      if (p0 != p) memory_.accumulate(sum, runtime::advance(recv, p * block + offset), part);
      const bool last_copy = p + 1 == size() || t.first(p + 1) != t.first(p);
      if (!last_copy) continue;
      memory_.copy_rows(runtime::advance(t.sequence, static_cast<std::int64_t>(t.first(p)) * head_dim),
                        static_cast<std::size_t>(t.all_heads) * head_dim * es, sum, width, width,
                        static_cast<std::size_t>(n));
    }
    offset += part;
  }
}

}  // namespace ptrain::parallel
