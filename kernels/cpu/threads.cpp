// set_cpu_threads: one knob for both thread pools of the CPU backend.
#include "kernels/cpu/threads.h"

#include <cblas.h>  // Debian's OpenBLAS declares openblas_set_num_threads here
#include <omp.h>

namespace ptrain::kernels {

void set_cpu_threads(int n) {
  const int threads = n < 1 ? 1 : n;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

}  // namespace ptrain::kernels
