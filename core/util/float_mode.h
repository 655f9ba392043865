// The CPU's handling of subnormal floats for compute threads.
#pragma once

namespace aiacc::util {

// Sets flush-to-zero and denormals-are-zero (x86 MXCSR; FZ in FPCR on AArch64) on the calling
// thread and on the threads of an OpenMP team of omp_get_max_threads() (call it after
// omp_set_num_threads; threads created later inherit the calling thread's mode). Subnormals
// cost tens to hundreds of cycles per operation: an optimiser's moments of a weight that stops
// getting gradient (a dead ReLU unit) decay into them after a few hundred steps and slow the
// whole update down (Wide&Deep on flights: Adam's step 12 -> 26 us from step ~700). Values
// below 1.2e-38 become 0, as TensorFlow's compute threads do.
// Returns false where the CPU has no such mode (nothing changed).
bool flush_denormals(bool on);

// Whether the calling thread flushes subnormals to zero.
bool flushing_denormals();

}  // namespace aiacc::util
