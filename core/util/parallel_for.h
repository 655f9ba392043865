// Loops shared out over OpenMP's threads only where there are threads to share them with:
// libgomp ends even a one-thread region with a futex system call (1.2 us here, 37 regions a
// flights step), so a one-thread worker runs these as plain loops, in index order.
#pragma once

#include <omp.h>

namespace aiacc::util {

// Whether a parallel region would run on more than one thread: the caller's size test
// (`large_enough`), more than one thread allowed, and not already inside a region (nested
// regions get one thread unless nesting is enabled, which this project never does).
//
// Bodies must not throw: on the threaded path they run inside a region, which an exception
// cannot leave (std::terminate), whatever the one-thread path would do.
inline bool use_threads(bool large_enough = true) {
  return large_enough && omp_in_parallel() == 0 && omp_get_max_threads() > 1;
}

// body(i) for i in [begin, end): split statically over the threads where use_threads says so.
template <class Index, class Body>
void parallel_for(Index begin, Index end, bool large_enough, Body&& body) {
  if (use_threads(large_enough)) {
#pragma omp parallel for schedule(static)
    for (Index i = begin; i < end; ++i) body(i);
  } else {
    for (Index i = begin; i < end; ++i) body(i);
  }
}

// parallel_for over independent element-wise iterations, vectorised (the body must carry no
// dependence between iterations). Capture pointers by value ([=]): captured by reference, GCC
// reloaded them every iteration and left ReLU's backward select scalar (11x slower).
template <class Index, class Body>
void parallel_for_simd(Index begin, Index end, bool large_enough, Body&& body) {
  if (use_threads(large_enough)) {
#pragma omp parallel for simd schedule(static)
    for (Index i = begin; i < end; ++i) body(i);
  } else {
#pragma omp simd
    for (Index i = begin; i < end; ++i) body(i);
  }
}

// parallel_for with chunks of `chunk` iterations handed to threads as they free up, for
// iterations of uneven cost.
template <class Index, class Body>
void parallel_for_dynamic(Index begin, Index end, Index chunk, bool large_enough, Body&& body) {
  if (use_threads(large_enough)) {
#pragma omp parallel for schedule(dynamic, chunk)
    for (Index i = begin; i < end; ++i) body(i);
  } else {
    for (Index i = begin; i < end; ++i) body(i);
  }
}

// The sum of body(i) over [begin, end) as a double; one thread adds in index order.
template <class Index, class Body>
double parallel_sum(Index begin, Index end, bool large_enough, Body&& body) {
  double total = 0.0;
  if (use_threads(large_enough)) {
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (Index i = begin; i < end; ++i) total += body(i);
  } else {
    for (Index i = begin; i < end; ++i) total += body(i);
  }
  return total;
}

}  // namespace aiacc::util
