// Thread count of the CPU kernels. OpenBLAS (GEMMs) and OpenMP (everything else) keep separate
// thread pools; set both to the same count, the cores this rank owns, or they oversubscribe.
#pragma once

namespace ptrain::kernels {

// openblas_set_num_threads(n) and omp_set_num_threads(n). Call from the main thread before any op,
// e.g. with the cores per rank (cores / local ranks). n < 1 is treated as 1.
void set_cpu_threads(int n);

}  // namespace ptrain::kernels
