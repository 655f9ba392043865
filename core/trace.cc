// The trace recorder: events are kept in mapped memory under one mutex and written at stop() as
// Trace Event Format JSON, one event per line, which is also the format merge_files() reads.
#include "core/trace.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/log.h"

namespace aiacc::trace {

namespace detail {
std::atomic<bool> recording{false};
}  // namespace detail

namespace {

// The lines that frame the event list; merge_files() relies on them.
constexpr std::string_view kHeaderLine = "{\"traceEvents\":[";
constexpr std::string_view kListEndLine = "],";
constexpr std::string_view kFooterLine = "\"displayTimeUnit\":\"ms\"}";

// One recorded event. Trivially copyable and destructible: it lives in an EventLog block, its
// name in that log's text blocks.
struct Event {
  char phase;            // 'X' complete, 'i' instant
  const char* category;  // a string literal
  std::string_view name;
  std::int64_t start_ns;
  std::int64_t duration_ns;
  int tid;
  detail::ArgList args;
};
static_assert(std::is_trivially_copyable_v<Event> && std::is_trivially_destructible_v<Event>);

// Anonymous memory mapped straight from the kernel (not from malloc), unmapped on destruction.
class MappedBlock {
 public:
  explicit MappedBlock(std::size_t bytes) : size_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(p);
  }
  ~MappedBlock() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  MappedBlock(MappedBlock&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedBlock(const MappedBlock&) = delete;
  MappedBlock& operator=(const MappedBlock&) = delete;
  MappedBlock& operator=(MappedBlock&&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// The recorded events and their names, append-only, in blocks of mapped memory. Why not a
// std::vector<Event> with std::string names: events live until stop(), and a few long-lived
// bytes allocated from malloc's heap every step pin the chunks that the step's tensors were
// freed into, so malloc cannot reuse them and grows the heap instead. Measured before this
// store: on a Wide&Deep job the heap grew by a tensor's size (256 KiB) every step, with ~50
// page faults a step, and tracing made training 1.6x slower than not tracing.
class EventLog {
 public:
  EventLog() = default;
  // A moved-from log is empty (counters included), ready to record again.
  EventLog(EventLog&& other) noexcept { take(other); }
  EventLog& operator=(EventLog&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  std::size_t size() const { return size_; }

  // Strong guarantee: when mapping memory fails (std::bad_alloc) nothing was recorded and the
  // log stays consistent (the name is copied before any block for the event is added).
  void append(const Event& event) {
    const std::string_view name = keep(event.name);
    if (size_ == event_blocks_.size() * kEventsPerBlock) {
      event_blocks_.emplace_back(kEventsPerBlock * sizeof(Event));
    }
    Event* slot = reinterpret_cast<Event*>(event_blocks_.back().data()) + size_ % kEventsPerBlock;
    new (slot) Event(event);
    slot->name = name;
    ++size_;
  }

  // fn(const Event&) for every event, in the order appended.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (std::size_t i = 0; i < size_; ++i) {
      const auto* block = reinterpret_cast<const Event*>(event_blocks_[i / kEventsPerBlock].data());
      fn(block[i % kEventsPerBlock]);
    }
  }

 private:
  static constexpr std::size_t kEventsPerBlock = 8192;      // ~1 MiB of events
  static constexpr std::size_t kTextBlockBytes = 1 << 20;

  // A copy of `text` in the text blocks (a name longer than a block gets a block of its own).
  std::string_view keep(std::string_view text) {
    if (text.empty()) return {};
    if (text_blocks_.empty() || text_used_ + text.size() > text_blocks_.back().size()) {
      text_blocks_.emplace_back(std::max(kTextBlockBytes, text.size()));
      text_used_ = 0;
    }
    char* at = reinterpret_cast<char*>(text_blocks_.back().data()) + text_used_;
    std::memcpy(at, text.data(), text.size());
    text_used_ += text.size();
    return {at, text.size()};
  }

  void take(EventLog& other) noexcept {
    event_blocks_ = std::move(other.event_blocks_);
    text_blocks_ = std::move(other.text_blocks_);
    size_ = std::exchange(other.size_, 0);
    text_used_ = std::exchange(other.text_used_, 0);
    other.event_blocks_.clear();
    other.text_blocks_.clear();
  }

  std::vector<MappedBlock> event_blocks_;
  std::vector<MappedBlock> text_blocks_;
  std::size_t size_ = 0;
  std::size_t text_used_ = 0;
};

// Everything stop() needs, guarded by `mutex`. `detail::recording` changes only under it.
struct Recorder {
  std::mutex mutex;
  std::string path;
  int pid = 0;
  std::string process_name;
  std::size_t max_events = 0;
  bool truncated = false;
  std::size_t dropped = 0;  // events lost because memory could not be mapped
  EventLog events;
  std::map<int, std::string> thread_names;  // by tid; kept across start/stop
};

// Never destroyed: a thread still ending a Span during static destruction must find a live mutex.
Recorder& recorder() {
  static Recorder* instance = new Recorder;
  return *instance;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(Event event) {
  Recorder& r = recorder();
  std::size_t cap = 0;
  {
    std::lock_guard lock(r.mutex);
    // Checked again under the lock: stop() may have run since the caller looked.
    if (!detail::recording.load(std::memory_order_relaxed)) return;
    if (r.events.size() < r.max_events) {
      try {
        r.events.append(event);
      } catch (const std::bad_alloc&) {
        ++r.dropped;  // said at stop(): in the file and the log
      }
      return;
    }
    if (r.truncated) return;
    r.truncated = true;
    cap = r.max_events;
    try {
      const std::string note =
          fmt::format("trace truncated: later events dropped (limit {} events)", cap);
      event.phase = 'i';
      event.category = "trace";
      event.name = note;
      event.duration_ns = 0;
      event.args = {};
      r.events.append(event);
    } catch (const std::bad_alloc&) {
      ++r.dropped;
    }
  }
  log::get("trace")->warn("trace limit of {} events reached; later events are not recorded", cap);
}

// Length of the valid UTF-8 sequence that starts at text[i], or 0 when it is not valid (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, beyond U+10FFFF).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code_point = 0, smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1Fu, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0Fu, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07u, smallest = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3Fu);
  }
  if (code_point < smallest || code_point > 0x10FFFF) return 0;
  if (code_point >= 0xD800 && code_point <= 0xDFFF) return 0;
  return length;
}

// Appends `text` as a JSON string. Invalid UTF-8 becomes U+FFFD so the file always parses.
void append_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    char c = text[i];
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
      } else {
        out.append(text, i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (byte < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(byte));
        } else {
          out += c;
        }
    }
    ++i;
  }
  out += '"';
}

// Microseconds with nanosecond digits, exact (no double rounding): 1234567 ns -> "1234.567".
void append_microseconds(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

void append_event(std::string& out, const Event& event, int pid) {
  out += "{\"name\":";
  append_string(out, event.name);
  out += ",\"cat\":";
  append_string(out, event.category);
  fmt::format_to(std::back_inserter(out), ",\"ph\":\"{}\",\"ts\":", event.phase);
  append_microseconds(out, event.start_ns);
  if (event.phase == 'X') {
    out += ",\"dur\":";
    append_microseconds(out, event.duration_ns);
  } else {
    out += ",\"s\":\"t\"";  // an instant scoped to its thread
  }
  fmt::format_to(std::back_inserter(out), ",\"pid\":{},\"tid\":{}", pid, event.tid);
  if (event.args.size > 0) {
    out += ",\"args\":{";
    for (std::size_t i = 0; i < event.args.size; ++i) {
      if (i > 0) out += ',';
      append_string(out, event.args.items[i].key);
      out += ':';
      double value = event.args.items[i].value;
      // JSON has no NaN or infinity.
      if (std::isfinite(value)) {
        fmt::format_to(std::back_inserter(out), "{}", value);
      } else {
        out += "null";
      }
    }
    out += '}';
  }
  out += '}';
}

// A metadata event ("ph":"M") with one argument, e.g. process_name {"name": "worker 0"}.
template <class Value>
std::string metadata(std::string_view kind, int pid, int tid, std::string_view arg_key,
                     const Value& value) {
  std::string out = fmt::format("{{\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{",
                                kind, pid, tid);
  append_string(out, arg_key);
  out += ':';
  if constexpr (std::is_arithmetic_v<Value>) {
    fmt::format_to(std::back_inserter(out), "{}", value);
  } else {
    append_string(out, value);
  }
  out += "}}";
  return out;
}

// The file format: header line, one event per line (comma-terminated except the last), the
// list-end line, the footer line.
std::string render(const std::vector<std::string>& lines) {
  std::size_t total = 64;
  for (const auto& line : lines) total += line.size() + 2;
  std::string out;
  out.reserve(total);
  out.append(kHeaderLine).append("\n");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += lines[i];
    out += i + 1 < lines.size() ? ",\n" : "\n";
  }
  out.append(kListEndLine).append("\n").append(kFooterLine).append("\n");
  return out;
}

// The event lines of a file written by render(); DataError naming the file and line otherwise.
std::vector<std::string> read_event_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError(fmt::format("cannot read trace file {}: {}", path, std::strerror(errno)));
  }
  auto not_ours = [&](std::size_t line_number, std::string_view what) {
    return DataError(fmt::format("{}:{}: not a trace written by aiacc::trace::stop(): {}", path,
                                 line_number, what));
  };
  std::vector<std::string> events;
  std::string line;
  std::size_t line_number = 0;
  enum class Part { kHeader, kEvents, kFooter, kEnd } part = Part::kHeader;
  while (std::getline(in, line)) {
    ++line_number;
    switch (part) {
      case Part::kHeader:
        if (line != kHeaderLine) throw not_ours(line_number, "expected the traceEvents header");
        part = Part::kEvents;
        break;
      case Part::kEvents:
        if (line == kListEndLine) {
          part = Part::kFooter;
          break;
        }
        if (!line.empty() && line.back() == ',') line.pop_back();
        if (line.size() < 2 || line.front() != '{' || line.back() != '}') {
          throw not_ours(line_number, "expected one event object per line");
        }
        events.push_back(std::move(line));
        break;
      case Part::kFooter:
        if (line != kFooterLine) throw not_ours(line_number, "expected the displayTimeUnit footer");
        part = Part::kEnd;
        break;
      case Part::kEnd:
        if (!line.empty()) throw not_ours(line_number, "text after the end of the trace");
        break;
    }
  }
  if (in.bad()) {
    throw IoError(fmt::format("cannot read trace file {}: {}", path, std::strerror(errno)));
  }
  if (part != Part::kEnd) throw not_ours(line_number, "the file ends early");
  return events;
}

}  // namespace

int thread_id() {
  static std::atomic<int> next_id{1};
  thread_local const int id = next_id.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void start(const std::string& path, int pid, const std::string& process_name,
           std::size_t max_events) {
  // Creating (and, on leaving the scope, removing) the temporary file that stop() will write
  // proves the directory exists and is writable; the error names the path and the cause.
  { io::AtomicFile probe(path); }
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  AIACC_CHECK(!detail::recording.load(std::memory_order_relaxed),
              "trace::start({}): already recording to {}", path, r.path);
  r.path = path;
  r.pid = pid;
  r.process_name = process_name;
  r.max_events = max_events;
  r.truncated = false;
  r.dropped = 0;
  r.events = EventLog();
  detail::recording.store(true, std::memory_order_relaxed);
}

void stop() {
  Recorder& r = recorder();
  std::string path, process_name;
  int pid = 0;
  EventLog events;
  std::size_t dropped = 0;
  std::map<int, std::string> thread_names;
  {
    std::lock_guard lock(r.mutex);
    if (!detail::recording.load(std::memory_order_relaxed)) return;
    detail::recording.store(false, std::memory_order_relaxed);
    path = std::move(r.path);
    process_name = std::move(r.process_name);
    pid = r.pid;
    events = std::exchange(r.events, EventLog());
    dropped = std::exchange(r.dropped, 0);
    thread_names = r.thread_names;
  }
  std::vector<std::string> lines;
  lines.reserve(events.size() + 2 * thread_names.size() + 2);
  lines.push_back(metadata("process_name", pid, 0, "name", process_name));
  lines.push_back(metadata("process_sort_index", pid, 0, "sort_index", pid));
  std::set<int> active_tids;  // threads long gone would otherwise show as empty tracks
  events.for_each([&](const Event& event) { active_tids.insert(event.tid); });
  for (const auto& [tid, name] : thread_names) {
    if (!active_tids.contains(tid)) continue;
    lines.push_back(metadata("thread_name", pid, tid, "name", name));
    lines.push_back(metadata("thread_sort_index", pid, tid, "sort_index", tid));
  }
  events.for_each([&](const Event& event) {
    std::string line;
    append_event(line, event, pid);
    lines.push_back(std::move(line));
  });
  if (dropped > 0) {
    // At the time and on the track of the last event kept (a track the file names), or now.
    const std::string note =
        fmt::format("trace incomplete: {} events dropped (out of memory)", dropped);
    Event marker{'i', "trace", note, now_ns(), 0, thread_id(), {}};
    events.for_each([&](const Event& event) {
      marker.start_ns = event.start_ns;
      marker.tid = event.tid;
    });
    std::string line;
    append_event(line, marker, pid);
    lines.push_back(std::move(line));
    log::get("trace")->warn("{} trace events could not be recorded: memory ran out", dropped);
  }
  io::write_file_atomically(path, render(lines));
  log::get("trace")->info("wrote {} trace events to {}", events.size(), path);
}

void set_thread_name(const std::string& name) {
  int tid = thread_id();
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  r.thread_names[tid] = name;
}

void instant(const char* category, std::string name, Args args) {
  if (!enabled()) return;
  Event event{'i', category, name, now_ns(), 0, thread_id(), {}};
  for (const Arg& arg : args) event.args.add(arg);
  record(event);
}

void Span::begin(const char* category, std::string name, Args args) {
  category_ = category;
  name_ = std::move(name);
  for (const Arg& arg : args) args_.add(arg);
  start_ns_ = now_ns();
}

void Span::end() noexcept {
  std::int64_t end_ns = now_ns();
  try {
    record(Event{'X', category_, name_, start_ns_, end_ns - start_ns_, thread_id(), args_});
  } catch (...) {
    // Out of memory or a logging failure: a lost trace event must not take training down.
  }
}

std::size_t merge_files(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<std::string> lines;
  for (const std::string& input : inputs) {
    std::vector<std::string> events = read_event_lines(input);
    std::move(events.begin(), events.end(), std::back_inserter(lines));
  }
  io::write_file_atomically(output, render(lines));
  return lines.size();
}

}  // namespace aiacc::trace
