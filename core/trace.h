// Trace recorder: a process-wide timeline of what each thread did (forward, backward, optimiser
// step, each bucket's all-reduce on the communication thread, each parameter-server request),
// written as a Chrome Trace Event Format JSON file. It exists to show, per rank, whether
// communication really overlaps backward, which a log or a step-time average cannot show.
//
// View: open the file (or the merge of all ranks' files, see merge_files) in
// https://ui.perfetto.dev or chrome://tracing. Each rank is a process (pid = rank, named e.g.
// "worker 0"), each thread a track; spans nest by time.
//
// Cost: when recording is off, a Span or instant() is one relaxed atomic load (plus building
// the name string, so guard names built with fmt::format by `if (trace::enabled())` on hot
// paths). When on, each event takes a mutex and appends 128 bytes plus its name to memory
// the recorder maps for itself, not to malloc's heap, which training's tensors churn (see
// EventLog in trace.cc); nothing is written until stop(). Timestamps come from
// std::chrono::steady_clock, whose origin on Linux is the machine's boot, shared by every
// process on the host, so ranks on one machine line up exactly in a merged file (ranks on
// different machines are each consistent, not aligned).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace aiacc::trace {

// Recorded events beyond this are dropped (one "trace truncated" instant event marks the spot):
// about 160 MB of memory at the cap (128 bytes and a name per event), hours of training at tens
// of events per step.
inline constexpr std::size_t kDefaultMaxEvents = 1'000'000;
// Numeric arguments per event (e.g. bytes, bucket index); further ones are ignored.
inline constexpr std::size_t kMaxArgs = 4;

// One numeric argument shown in the event's details. `key` is stored by pointer until stop():
// it must be a string literal (or otherwise outlive the recording).
struct Arg {
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  Arg(const char* k, T v) : key(k), value(static_cast<double>(v)) {}
  const char* key;
  double value;
};
using Args = std::initializer_list<Arg>;

namespace detail {
extern std::atomic<bool> recording;
struct ArgList {
  Arg items[kMaxArgs] = {{"", 0}, {"", 0}, {"", 0}, {"", 0}};
  std::uint8_t size = 0;
  void add(const Arg& arg) {
    if (size < kMaxArgs) items[size++] = arg;
  }
};
}  // namespace detail

// Whether recording is on. Thread-safe, one relaxed atomic load.
inline bool enabled() { return detail::recording.load(std::memory_order_relaxed); }

// Turns recording on for this process. Events carry `pid` (use the rank) and the file gets a
// process_name metadata event (`process_name`, e.g. "worker 0"). `path` is checked now by
// creating (and removing) a temporary file next to it, so a bad directory fails at startup, not
// at the end of training: IoError naming the path. InternalError when already recording.
// `max_events` caps memory (tests pass a small value). Thread-safe.
void start(const std::string& path, int pid, const std::string& process_name,
           std::size_t max_events = kDefaultMaxEvents);

// Turns recording off and writes everything recorded since start() to the path given there,
// atomically (temporary file + rename, see core/io/atomic_file.h). Spans still open when it runs
// are not written. A no-op when not recording. IoError naming the path when the write fails
// (recording is off and the events are gone either way). Thread-safe.
void stop();

// Names the calling thread's track ("main", "comm", "ps client"). May be called before start():
// names are kept for the whole process, and every stop() writes those of the threads that
// recorded events. Thread-safe.
void set_thread_name(const std::string& name);

// The calling thread's trace id: a small integer (1, 2, ...) assigned on first use.
int thread_id();

// A zero-length marker on the calling thread's track (e.g. "epoch 3", "checkpoint saved").
// `category` must be a string literal. Does nothing when not recording.
void instant(const char* category, std::string name, Args args = {});

// Records the time from construction to destruction on the calling thread as one complete
// event ("ph":"X"); spans on one thread nest. `category` ("compute", "comm", "ps") must be a
// string literal. Does nothing when recording was off at construction. Not movable: create it
// on the stack of the thread it measures.
class Span {
 public:
  Span(const char* category, std::string name, Args args = {}) {
    if (enabled()) begin(category, std::move(name), args);
  }
  ~Span() {
    if (category_ != nullptr) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  // Adds an argument known only while the span runs (e.g. bytes received).
  void arg(const char* key, double value) {
    if (category_ != nullptr) args_.add({key, value});
  }

 private:
  void begin(const char* category, std::string name, Args args);
  void end() noexcept;

  const char* category_ = nullptr;  // null: not recording
  std::string name_;
  std::int64_t start_ns_ = 0;
  detail::ArgList args_;
};

// Writes to `output` (atomically) one trace holding the events of every file in `inputs`, which
// must be files written by stop() (typically one per rank; each keeps its own pid). Returns the
// number of events written. IoError naming the file that cannot be read or written; DataError
// naming the file and line when an input is not a trace written by stop().
std::size_t merge_files(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace aiacc::trace
