// set_cpu_threads: the CPU backend's threads are OpenMP's; OpenBLAS runs single-threaded inside
// them (linear.cpp splits each GEMM over the OpenMP threads).
#include "kernels/cpu/threads.h"

#include <cblas.h>  // Debian's OpenBLAS declares openblas_set_num_threads here
#include <omp.h>

namespace ptrain::kernels {

void set_cpu_threads(int n) {
  const int threads = n < 1 ? 1 : n;
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
}

int current_cpu_threads() { return omp_get_max_threads(); }

}  // namespace ptrain::kernels
