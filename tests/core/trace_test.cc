// The trace recorder writes valid Trace Event Format JSON (checked with an independent parser):
// nested spans from several threads, metadata, escaping, the event cap, merging ranks' files,
// and errors that name the path.
#include "core/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tests/core/io/temp_dir.h"

namespace aiacc::trace {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using aiacc::testing::TempDir;

json load(const std::filesystem::path& path) {
  return json::parse(aiacc::testing::read_bytes(path));
}

// The only event named `name` with phase `phase`; fails the test when there is not exactly one.
json find_event(const json& trace, const std::string& name, const std::string& phase = "X") {
  std::vector<json> found;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("name") == name && event.at("ph") == phase) found.push_back(event);
  }
  EXPECT_EQ(found.size(), 1u) << "events named '" << name << "' with ph " << phase;
  return found.empty() ? json::object() : found.front();
}

// The metadata event `kind` (process_name, thread_name) for `tid`, its args.name.
std::string metadata_name(const json& trace, const std::string& kind, int pid, int tid) {
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == kind && event.at("pid") == pid &&
        event.at("tid") == tid) {
      return event.at("args").at("name");
    }
  }
  return "<no " + kind + " metadata>";
}

int count_phase(const json& trace, const std::string& phase) {
  int count = 0;
  for (const json& event : trace.at("traceEvents")) count += event.at("ph") == phase ? 1 : 0;
  return count;
}

// `inner` lies within `outer` in time (same clock, microseconds).
void expect_nested(const json& inner, const json& outer) {
  double inner_ts = inner.at("ts"), inner_dur = inner.at("dur");
  double outer_ts = outer.at("ts"), outer_dur = outer.at("dur");
  EXPECT_GE(inner_ts, outer_ts) << inner << " starts before " << outer;
  EXPECT_LE(inner_ts + inner_dur, outer_ts + outer_dur + 1e-3) << inner << " ends after " << outer;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

void pause_briefly() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

TEST(Trace, NestedSpansFromTwoThreadsAreValidJson) {
  TempDir dir;
  const auto path = dir / "rank3.json";
  const std::string odd_name = "say \"hi\" \\ C:\\dir\nnext\tcol\x01 end";
  start(path.string(), 3, "worker 3");
  ASSERT_TRUE(enabled());
  set_thread_name("main");
  int comm_tid = 0;
  {
    Span backward("compute", "backward", {{"layers", 2}});
    {
      Span layer("compute", "layer 1");
      pause_briefly();
    }
    std::thread comm([&] {
      set_thread_name("comm \"all-reduce\"");
      comm_tid = thread_id();
      Span bucket("comm", "allreduce bucket 0", {{"bytes", std::size_t{4096}}});
      Span send("comm", "send");
      send.arg("peer", 1);
      pause_briefly();
    });
    comm.join();
    Span odd("compute", odd_name);
    Span bad_utf8("compute", "bad \xff utf8");
    instant("compute", "step 7", {{"step", 7}});
  }
  stop();
  EXPECT_FALSE(enabled());

  json trace = load(path);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  for (const json& event : trace.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) {
      EXPECT_TRUE(event.contains(key)) << event << " lacks " << key;
    }
    EXPECT_EQ(event.at("pid"), 3) << event;
    if (event.at("ph") == "X") {
      for (const char* key : {"cat", "ts", "dur"}) {
        EXPECT_TRUE(event.contains(key)) << event << " lacks " << key;
      }
      EXPECT_GE(event.at("dur").get<double>(), 0.0) << event;
    }
  }
  EXPECT_EQ(count_phase(trace, "X"), 6);

  json backward = find_event(trace, "backward"), layer = find_event(trace, "layer 1");
  json bucket = find_event(trace, "allreduce bucket 0"), send = find_event(trace, "send");
  expect_nested(layer, backward);
  expect_nested(send, bucket);
  expect_nested(bucket, backward);  // the comm thread ran while backward was open
  EXPECT_GE(layer.at("dur").get<double>(), 1000.0);  // slept 2 ms
  EXPECT_EQ(backward.at("tid"), layer.at("tid"));
  EXPECT_EQ(bucket.at("tid"), send.at("tid"));
  EXPECT_NE(backward.at("tid"), bucket.at("tid"));
  EXPECT_EQ(backward.at("tid"), thread_id());
  EXPECT_EQ(bucket.at("tid"), comm_tid);
  EXPECT_EQ(backward.at("cat"), "compute");
  EXPECT_EQ(bucket.at("cat"), "comm");
  EXPECT_EQ(backward.at("args").at("layers"), 2);
  EXPECT_EQ(bucket.at("args").at("bytes"), 4096);
  EXPECT_EQ(send.at("args").at("peer"), 1);

  EXPECT_EQ(metadata_name(trace, "process_name", 3, 0), "worker 3");
  EXPECT_EQ(metadata_name(trace, "thread_name", 3, thread_id()), "main");
  EXPECT_EQ(metadata_name(trace, "thread_name", 3, comm_tid), "comm \"all-reduce\"");

  find_event(trace, odd_name);  // the escaped name reads back exactly
  find_event(trace, "bad \xEF\xBF\xBD utf8");
  json step = find_event(trace, "step 7", "i");
  EXPECT_EQ(step.at("args").at("step"), 7);

  // No temporary file is left next to the trace.
  EXPECT_EQ(aiacc::testing::list_names(dir.path()), std::vector<std::string>{"rank3.json"});
}

TEST(Trace, DisabledRecorderWritesNothing) {
  TempDir dir;
  EXPECT_FALSE(enabled());
  {
    Span span("compute", "forward", {{"bytes", 1}});
    span.arg("more", 2);
    instant("compute", "marker");
  }
  EXPECT_NO_THROW(stop());  // never started: nothing to write
  EXPECT_TRUE(aiacc::testing::list_names(dir.path()).empty());

  // Spans open across stop() or made while off do not leak into the next recording.
  start((dir / "first.json").string(), 0, "worker 0");
  auto open_across_stop = std::make_unique<Span>("compute", "open across stop");
  stop();
  open_across_stop.reset();
  { Span off("compute", "while off"); }
  start((dir / "second.json").string(), 0, "worker 0");
  { Span on("compute", "while on"); }
  stop();
  json first = load(dir / "first.json"), second = load(dir / "second.json");
  EXPECT_EQ(count_phase(first, "X"), 0);
  EXPECT_EQ(count_phase(second, "X"), 1);
  find_event(second, "while on");
}

TEST(Trace, ConcurrentThreadsLoseNoEvents) {
  TempDir dir;
  constexpr int kThreads = 4, kSpansPerThread = 500;
  start((dir / "t.json").string(), 0, "worker 0");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kSpansPerThread; ++i) Span span("compute", "span " + std::to_string(i));
    });
  }
  for (auto& thread : threads) thread.join();
  stop();
  json trace = load(dir / "t.json");
  EXPECT_EQ(count_phase(trace, "X"), kThreads * kSpansPerThread);
  std::set<int> tids;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "X") tids.insert(event.at("tid").get<int>());
  }
  EXPECT_EQ(tids.size(), static_cast<std::size_t>(kThreads));
}

TEST(Trace, EventCapDropsLaterEventsAndSaysSo) {
  TempDir dir;
  start((dir / "capped.json").string(), 0, "worker 0", /*max_events=*/5);
  for (int i = 0; i < 20; ++i) Span span("compute", "step " + std::to_string(i));
  stop();
  json trace = load(dir / "capped.json");
  EXPECT_EQ(count_phase(trace, "X"), 5);
  find_event(trace, "step 4");
  int notes = 0;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "i") {
      EXPECT_THAT(event.at("name").get<std::string>(), HasSubstr("trace truncated"));
      ++notes;
    }
  }
  EXPECT_EQ(notes, 1);
}

// Recorded events live until stop(); kept on malloc's heap, a few bytes a training step pinned
// the chunks the step's tensors were freed into, and the heap grew by a tensor every step. So
// recording must leave the heap as it found it: before the mapped event store, these 20k events
// kept ~2.5 MB there.
TEST(Trace, RecordedEventsStayOffTheHeap) {
  TempDir dir;
  const std::string long_name(3 << 20, 'n');  // bigger than one block of names
  start((dir / "heap.json").string(), 0, "worker 0");
  const std::size_t heap_before = mallinfo2().uordblks;
  for (int i = 0; i < 20'000; ++i) {
    Span span("compute", "a name longer than the small-string buffer " + std::to_string(i));
  }
  instant("compute", long_name);
  const std::size_t heap_after = mallinfo2().uordblks;
  stop();
  EXPECT_LT(heap_after, heap_before + (64u << 10)) << "bytes in use on the heap grew by "
                                                   << heap_after - heap_before;
  json trace = load(dir / "heap.json");
  EXPECT_EQ(count_phase(trace, "X"), 20'000);
  find_event(trace, "a name longer than the small-string buffer 19999");
  EXPECT_EQ(find_event(trace, long_name, "i").at("name").get<std::string>().size(),
            long_name.size());
}

// The bytes of address space this process has mapped (VmSize).
std::size_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// Child process of the test below: records with the address space limited, then exits 0 when
// the file holds the events that fit and one note counting the others.
[[noreturn]] void record_while_memory_runs_out(const std::filesystem::path& path) {
  start(path.string(), 0, "worker 0");
  { Span first("compute", "first"); }  // maps the first event and name blocks
  rlimit limit{};
  getrlimit(RLIMIT_AS, &limit);
  const rlim_t unlimited = limit.rlim_cur;
  limit.rlim_cur = mapped_bytes() + (256u << 10);  // less than one more 1 MiB block
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
  // The first block holds 8192 events; the last 10000 - 8191 find no block.
  for (int i = 0; i < 10'000; ++i) Span span("compute", "s");
  limit.rlim_cur = unlimited;
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(4);
  stop();
  const json trace = load(path);
  int complete = 0;
  int notes = 0;
  for (const json& event : trace.at("traceEvents")) {
    complete += event.at("ph") == "X" ? 1 : 0;
    notes += event.at("name") == "trace incomplete: 1809 events dropped (out of memory)" ? 1 : 0;
  }
  std::_Exit(complete == 8192 && notes == 1 ? 0 : 1);
}

// When memory for events cannot be mapped (here: an address-space limit), the events already
// recorded are kept, the rest are dropped without disturbing the caller, and stop() writes a
// valid file that says how many were lost.
TEST(Trace, EventsThatFindNoMemoryAreCountedAndTheRestWritten) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "an address-space limit and a sanitizer's shadow memory do not mix";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  GTEST_SKIP() << "an address-space limit and a sanitizer's shadow memory do not mix";
#endif
#endif
  TempDir dir;
  EXPECT_EXIT(record_while_memory_runs_out(dir / "oom.json"), ::testing::ExitedWithCode(0), "");
}

TEST(Trace, MergeKeepsEveryRank) {
  TempDir dir;
  for (int rank : {0, 1}) {
    start((dir / ("rank" + std::to_string(rank) + ".json")).string(), rank,
          "worker " + std::to_string(rank));
    { Span span("compute", "forward of rank " + std::to_string(rank)); }
    instant("ps", "pull");
    Span open("compute", "open at stop");  // not written: it ends after stop()
    stop();
  }
  const auto merged = dir / "merged.json";
  std::size_t count = merge_files({(dir / "rank0.json").string(), (dir / "rank1.json").string()},
                                  merged.string());
  json trace = load(merged);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_EQ(trace.at("traceEvents").size(), count);
  std::set<int> pids;
  for (const json& event : trace.at("traceEvents")) pids.insert(event.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(find_event(trace, "forward of rank 0").at("pid"), 0);
  EXPECT_EQ(find_event(trace, "forward of rank 1").at("pid"), 1);
  EXPECT_EQ(metadata_name(trace, "process_name", 0, 0), "worker 0");
  EXPECT_EQ(metadata_name(trace, "process_name", 1, 0), "worker 1");
  EXPECT_EQ(count_phase(trace, "i"), 2);

  // A merged file is itself mergeable; an empty merge is valid JSON.
  const auto twice = dir / "twice.json";
  EXPECT_EQ(merge_files({merged.string(), (dir / "rank0.json").string()}, twice.string()),
            count + load(dir / "rank0.json").at("traceEvents").size());
  EXPECT_EQ(load(twice).at("traceEvents").size(),
            count + load(dir / "rank0.json").at("traceEvents").size());
  EXPECT_EQ(merge_files({}, (dir / "empty.json").string()), 0u);
  EXPECT_TRUE(load(dir / "empty.json").at("traceEvents").empty());
}

TEST(Trace, ErrorsNameThePath) {
  TempDir dir;
  const std::string missing_dir = (dir / "no-such-dir" / "trace.json").string();
  std::string m = message_of([&] { start(missing_dir, 0, "worker 0"); });
  EXPECT_THAT(m, HasSubstr(missing_dir));
  EXPECT_THROW(start(missing_dir, 0, "worker 0"), IoError);
  EXPECT_FALSE(enabled());

  // The directory disappears during the run: stop() reports it and recording is off.
  std::filesystem::create_directory(dir / "gone");
  const std::string gone = (dir / "gone" / "trace.json").string();
  start(gone, 0, "worker 0");
  { Span span("compute", "forward"); }
  std::filesystem::remove_all(dir / "gone");
  m = message_of([] { stop(); });
  EXPECT_THAT(m, HasSubstr(gone));
  EXPECT_FALSE(enabled());
  EXPECT_NO_THROW(stop());

  // Starting twice is a bug in the caller.
  const std::string ok = (dir / "ok.json").string();
  start(ok, 0, "worker 0");
  EXPECT_THROW(start(ok, 0, "worker 0"), InternalError);
  stop();

  // Merge: unreadable input, a file that is not our trace, an unwritable output.
  const std::string absent = (dir / "absent.json").string();
  m = message_of([&] { merge_files({ok, absent}, (dir / "m.json").string()); });
  EXPECT_THAT(m, HasSubstr(absent));
  EXPECT_THROW(merge_files({absent}, (dir / "m.json").string()), IoError);
  aiacc::testing::write_bytes(dir / "other.json", "{\"traceEvents\": []}\n");
  EXPECT_THROW(merge_files({(dir / "other.json").string()}, (dir / "m.json").string()), DataError);
  m = message_of([&] { merge_files({(dir / "other.json").string()}, (dir / "m.json").string()); });
  EXPECT_THAT(m, HasSubstr((dir / "other.json").string() + ":1:"));
  aiacc::testing::write_bytes(dir / "cut.json", aiacc::testing::read_bytes(ok).substr(0, 40));
  EXPECT_THROW(merge_files({(dir / "cut.json").string()}, (dir / "m.json").string()), DataError);
  m = message_of([&] { merge_files({ok}, missing_dir); });
  EXPECT_THAT(m, HasSubstr(missing_dir));
  EXPECT_FALSE(std::filesystem::exists(dir / "m.json"));
}

}  // namespace
}  // namespace aiacc::trace
