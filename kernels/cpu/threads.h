// Thread count of the CPU kernels: OpenMP's pool does all the parallel work; GEMMs are split over it
// with OpenBLAS single-threaded inside each thread (two spinning pools on the same cores made two
// threads slower than one).
#pragma once

namespace ptrain::kernels {

// omp_set_num_threads(n) and openblas_set_num_threads(1). Call from the main thread before any op,
// e.g. with the cores per rank (cores / local ranks). n < 1 is treated as 1.
void set_cpu_threads(int n);
// The threads the calling thread's CPU ops use (what set_cpu_threads gave it): another thread of
// the rank that runs CPU ops (the optimizer offload's host update) sets its own to this.
int current_cpu_threads();

}  // namespace ptrain::kernels
