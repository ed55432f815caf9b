// Thread count of the CPU kernels: OpenMP's pool does all the parallel work; GEMMs are split over it
// with OpenBLAS single-threaded inside each thread (two spinning pools on the same cores made two
// threads slower than one).
#pragma once

namespace ptrain::kernels {

// omp_set_num_threads(n) and openblas_set_num_threads(1). Call from the main thread before any op,
// e.g. with the cores per rank (cores / local ranks). n < 1 is treated as 1.
void set_cpu_threads(int n);

}  // namespace ptrain::kernels
