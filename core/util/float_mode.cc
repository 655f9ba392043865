// flush_denormals: MXCSR bits FTZ (15) and DAZ (6) on x86-64; FPCR.FZ (24) on AArch64.
#include "core/util/float_mode.h"

#include <omp.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace aiacc::util {
namespace {

#if defined(__x86_64__)
constexpr unsigned kFlushBits = 0x8040;  // FTZ | DAZ
bool set_this_thread(bool on) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(on ? (csr | kFlushBits) : (csr & ~kFlushBits));
  return true;
}
bool this_thread_flushes() { return (_mm_getcsr() & kFlushBits) == kFlushBits; }
#elif defined(__aarch64__)
constexpr unsigned long kFlushBit = 1ul << 24;  // FPCR.FZ
bool set_this_thread(bool on) {
  unsigned long fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  fpcr = on ? (fpcr | kFlushBit) : (fpcr & ~kFlushBit);
  asm volatile("msr fpcr, %0" : : "r"(fpcr));
  return true;
}
bool this_thread_flushes() {
  unsigned long fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return (fpcr & kFlushBit) != 0;
}
#else
bool set_this_thread(bool) { return false; }
bool this_thread_flushes() { return false; }
#endif

}  // namespace

bool flush_denormals(bool on) {
  const bool supported = set_this_thread(on);
  if (!supported) return false;
  // Each pool thread keeps the mode it was created with: set it in every one of them.
#pragma omp parallel
  set_this_thread(on);
  return true;
}

bool flushing_denormals() { return this_thread_flushes(); }

}  // namespace aiacc::util
