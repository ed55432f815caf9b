#include "engine/parallel/tensor_parallel.h"

#include <stdexcept>
#include <string>

#include "engine/runtime/owned_buffer.h"

namespace ptrain::parallel {
namespace {

std::size_t count(std::int64_t n) {
  return static_cast<std::size_t>(n);
}
std::size_t bytes(kernels::Buf b, std::int64_t n) {
  return count(n) * kernels::dtype_size(b.dtype);
}

}  // namespace

TensorParallel::TensorParallel(dist::Comm& comm, const kernels::Ops& memory, const dist::Group& tp,
                               const dist::Group* kv_copies, bool sequence_parallel)
    : comm_(comm),
      memory_(memory),
      tp_(tp),
      kv_copies_(kv_copies),
      sequence_parallel_(sequence_parallel),
      staged_(memory, comm) {
  if (!tp.has_me()) throw std::invalid_argument("TensorParallel: this rank is not in tp group " + tp.name);
  if (kv_copies != nullptr && !kv_copies->has_me())
    throw std::invalid_argument("TensorParallel: this rank is not in kv group " + kv_copies->name);
}

void TensorParallel::sum_partials(kernels::Buf x, std::int64_t n) {
  staged_.run(tp_, x.ptr, bytes(x, n),
              [&](void* p) { comm_.all_reduce(tp_, p, count(n), comm_type(x.dtype)); });
}

void TensorParallel::gather_chunks(kernels::Buf chunks, std::int64_t chunk) {
  staged_.run(tp_, chunks.ptr, bytes(chunks, chunk * size()),
              [&](void* p) { comm_.all_gather(tp_, p, count(chunk), comm_type(chunks.dtype)); });
}

void TensorParallel::sum_scatter(kernels::Buf chunks, std::int64_t chunk) {
  staged_.run(tp_, chunks.ptr, bytes(chunks, chunk * size()),
              [&](void* p) { comm_.reduce_scatter(tp_, p, count(chunk), comm_type(chunks.dtype)); });
}

kernels::Buf TensorParallel::reduce_tokens(kernels::Buf full, std::int64_t mine) {
  if (!sequence_parallel_) {
    sum_partials(full, mine);
    return full;
  }
  sum_scatter(full, mine);
  return runtime::advance(full, rank() * mine);
}

kernels::Buf TensorParallel::gather_tokens(kernels::Buf mine, kernels::Buf full, std::int64_t n) {
  if (!sequence_parallel_) return mine;
  memory_.copy(runtime::advance(full, rank() * n), mine, bytes(mine, n));
  gather_chunks(full, n);
  return full;
}

void TensorParallel::sum_kv_copies(kernels::Buf x, std::int64_t n) {
  if (kv_copies_ == nullptr) return;
  staged_.run(*kv_copies_, x.ptr, bytes(x, n),
              [&](void* p) { comm_.all_reduce(*kv_copies_, p, count(n), comm_type(x.dtype)); });
}

}  // namespace ptrain::parallel
