#include "engine/parallel/tensor_parallel.h"

#include <stdexcept>
#include <string>

namespace ptrain::parallel {
namespace {

dist::ElemType elem_type(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::F32:
      return dist::ElemType::F32;
    case kernels::DType::BF16:
      return dist::ElemType::BF16;
    default:
      throw std::invalid_argument(std::string("TensorParallel: activations are F32 or BF16, not ") +
                                  kernels::to_string(dtype));
  }
}

}  // namespace

TensorParallel::TensorParallel(dist::Comm& comm, const dist::Group& tp, const dist::Group* kv_copies)
    : comm_(comm), tp_(tp), kv_copies_(kv_copies) {
  if (!tp.has_me()) throw std::invalid_argument("TensorParallel: this rank is not in tp group " + tp.name);
  if (kv_copies != nullptr && !kv_copies->has_me())
    throw std::invalid_argument("TensorParallel: this rank is not in kv group " + kv_copies->name);
}

void TensorParallel::sum_partials(kernels::Buf x, std::int64_t n) const {
  comm_.all_reduce(tp_, x.ptr, static_cast<std::size_t>(n), elem_type(x.dtype));
}

void TensorParallel::gather_chunks(kernels::Buf chunks, std::int64_t chunk) const {
  comm_.all_gather(tp_, chunks.ptr, static_cast<std::size_t>(chunk), elem_type(chunks.dtype));
}

void TensorParallel::sum_scatter(kernels::Buf chunks, std::int64_t chunk) const {
  comm_.reduce_scatter(tp_, chunks.ptr, static_cast<std::size_t>(chunk), elem_type(chunks.dtype));
}

void TensorParallel::sum_kv_copies(kernels::Buf x, std::int64_t n) const {
  if (kv_copies_ != nullptr)
    comm_.all_reduce(*kv_copies_, x.ptr, static_cast<std::size_t>(n), elem_type(x.dtype));
}

}  // namespace ptrain::parallel
