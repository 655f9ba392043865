// A small stand-alone driver for the libFuzzer harnesses (LLVMFuzzerTestOneInput), so that
// every build (GCC, no libFuzzer) runs them as tests: each seed file once, then deterministic
// random mutations of the seeds (bit flips, byte inserts and deletes, truncation, splices,
// 4- and 8-byte overwrites with boundary values such as 2^31, 2^32 and 2^63, and decimal
// boundary numbers in text) until the time budget is spent. An exception escaping the harness
// (the harness swallows the expected aiacc::Error types), a crash or an input running longer
// than --input-timeout is a finding: the input is written to --artifacts and the exit status is
// non-zero. The mutation sequence depends only on --seed, so `--runs N` replays a failure.
//
//   fuzz_<name>_smoke [--seconds S] [--runs N] [--seed N] [--max-len BYTES]
//                     [--input-timeout S] [--artifacts DIR] CORPUS_DIR_OR_FILE...
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 2.0;
  long long runs = -1;  // mutations to run (-1: until the time budget is spent)
  std::uint64_t seed = 0x5eed;
  std::size_t max_len = 4096;
  double input_timeout_s = 20.0;
  std::string artifacts = ".";
  std::vector<std::string> corpus;
};

[[noreturn]] void usage(const char* program, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--seconds S] [--runs N] [--seed N] [--max-len BYTES] "
               "[--input-timeout S] [--artifacts DIR] CORPUS_DIR_OR_FILE...\n",
               program, problem.c_str(), program);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0], arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--seconds") options.seconds = std::stod(value());
      else if (arg == "--runs") options.runs = std::stoll(value());
      else if (arg == "--seed") options.seed = std::stoull(value(), nullptr, 0);
      else if (arg == "--max-len") options.max_len = std::stoull(value());
      else if (arg == "--input-timeout") options.input_timeout_s = std::stod(value());
      else if (arg == "--artifacts") options.artifacts = value();
      else if (arg.starts_with("--")) usage(argv[0], "unknown option " + arg);
      else options.corpus.push_back(arg);
    } catch (const std::logic_error&) {
      usage(argv[0], "bad value for " + arg);
    }
  }
  return options;
}

// splitmix64: small, fast and the same sequence everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0.
  std::size_t below(std::size_t bound) { return static_cast<std::size_t>(next() % bound); }

 private:
  std::uint64_t state_;
};

constexpr std::uint64_t kInteresting[] = {
    0,           1,           2,           0x7f,        0x80,        0xff,
    0x100,       0x7fff,      0x8000,      0xffff,      0x10000,     0x40000000,
    0x7fffffff,  0x80000000,  0xfffffffe,  0xffffffff,  0x100000000ull,
    0x1000000000000000ull,    0x2000000000000000ull,    0x4000000000000000ull,
    0x7fffffffffffffffull,    0x8000000000000000ull,    0xffffffffffffffffull};
constexpr std::string_view kNumbers[] = {
    "0",   "-1",  "1",          "255",        "65536",      "2147483647", "2147483648",
    "-2147483649", "4294967296", "9223372036854775807", "9223372036854775808",
    "18446744073709551616", "99999999999999999999999", "1e308", "1e400", "-0", ".nan", ".inf", "0x10"};
constexpr std::string_view kTokens[] = {
    "\n", "\t", "\r\n", " ", "{", "}", "[", "]", ",", ":", ": ", "- ", "&a ", "*a", "!!str ",
    "\"", "'", "\\", "#", "=", ".", "\0", "\xff", "\xc3\xa9", "null", "~", "true", "---\n"};

void overwrite(std::string& data, std::size_t width, std::uint64_t value, bool big_endian,
               Rng& rng) {
  if (data.size() < width) return;
  std::size_t at = rng.below(data.size() - width + 1);
  if (rng.below(2) == 0) at -= at % width;  // length fields are usually aligned
  for (std::size_t b = 0; b < width; ++b) {
    const std::size_t shift = 8 * (big_endian ? width - 1 - b : b);
    data[at + b] = static_cast<char>((value >> shift) & 0xff);
  }
}

std::uint64_t interesting(Rng& rng) {
  std::uint64_t value = kInteresting[rng.below(std::size(kInteresting))];
  switch (rng.below(4)) {
    case 0: return value + 1;
    case 1: return value - 1;
    default: return value;
  }
}

void mutate_once(std::string& data, const std::vector<std::string>& seeds, Rng& rng) {
  const std::size_t size = data.size();
  switch (rng.below(12)) {
    case 0:  // flip one bit
      if (size) data[rng.below(size)] ^= static_cast<char>(1u << rng.below(8));
      break;
    case 1:  // set one byte
      if (size) data[rng.below(size)] = static_cast<char>(rng.next());
      break;
    case 2: {  // insert 1-4 random bytes
      std::string bytes(1 + rng.below(4), '\0');
      for (char& c : bytes) c = static_cast<char>(rng.next());
      data.insert(rng.below(size + 1), bytes);
      break;
    }
    case 3:  // delete 1-8 bytes
      if (size) {
        const std::size_t at = rng.below(size);
        data.erase(at, 1 + rng.below(8));
      }
      break;
    case 4:  // truncate
      data.resize(rng.below(size + 1));
      break;
    case 5: overwrite(data, 4, interesting(rng), false, rng); break;
    case 6: overwrite(data, 8, interesting(rng), false, rng); break;
    case 7: overwrite(data, 4, interesting(rng), true, rng); break;  // big-endian (IDX)
    case 8:  // duplicate a piece somewhere else
      if (size) {
        const std::size_t from = rng.below(size);
        const std::string piece = data.substr(from, 1 + rng.below(std::min<std::size_t>(size - from, 64)));
        data.insert(rng.below(size + 1), piece);
      }
      break;
    case 9: {  // splice: our prefix, another seed's suffix
      const std::string& other = seeds[rng.below(seeds.size())];
      data = data.substr(0, rng.below(size + 1)) + other.substr(rng.below(other.size() + 1));
      break;
    }
    case 10: {  // a run of digits (or any position) becomes a boundary number
      const std::string_view number = kNumbers[rng.below(std::size(kNumbers))];
      std::size_t at = rng.below(size + 1);
      const auto digit = [&](std::size_t i) { return i < data.size() && data[i] >= '0' && data[i] <= '9'; };
      std::size_t end = at;
      while (digit(end)) ++end;
      while (at > 0 && digit(at - 1)) --at;
      data.replace(at, end - at, number);
      break;
    }
    default: {  // a structural token
      const std::string_view token = kTokens[rng.below(std::size(kTokens))];
      data.insert(rng.below(size + 1), token.empty() ? std::string_view("\0", 1) : token);
      break;
    }
  }
}

std::vector<std::string> load_seeds(const std::vector<std::string>& paths, std::vector<std::string>& names) {
  std::vector<std::string> seeds;
  auto add = [&](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) usage("fuzz smoke", "cannot read " + path.string());
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    names.push_back(path.string());
  };
  for (const auto& path : paths) {
    if (fs::is_directory(path)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) add(file);
    } else {
      add(path);
    }
  }
  if (seeds.empty()) {
    seeds.emplace_back();
    names.emplace_back("(empty input)");
  }
  return seeds;
}

// What the signal handler and the watchdog need, prepared before any input runs.
std::string g_crash_path;
const std::string* g_current = nullptr;
std::atomic<long long> g_started_ns{0};  // when the current input started (0: none running)

void write_current(const char* path) {
  if (g_current == nullptr) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const char* p = g_current->data();
  std::size_t left = g_current->size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  ::close(fd);
}

void on_fatal_signal(int signal) {
  write_current(g_crash_path.c_str());
  const char text[] = "\nfuzz smoke: FINDING: fatal signal; the input is in ";
  (void)!::write(2, text, sizeof text - 1);
  (void)!::write(2, g_crash_path.data(), g_crash_path.size());
  (void)!::write(2, "\n", 1);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_args(argc, argv);
  const std::string name = fs::path(argv[0]).filename().string();
  std::vector<std::string> seed_names;
  const std::vector<std::string> seeds = load_seeds(options.corpus, seed_names);

  fs::create_directories(options.artifacts);
  g_crash_path = (fs::path(options.artifacts) / (name + "-crash.bin")).string();
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, on_fatal_signal);

  // Watchdog: an input that runs too long is a hang (or an unbounded loop): report and stop.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto limit_ns = static_cast<long long>(options.input_timeout_s * 1e9);
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const long long started = g_started_ns.load();
      if (started != 0 && now_ns() - started > limit_ns) {
        const std::string path = (fs::path(options.artifacts) / (name + "-timeout.bin")).string();
        write_current(path.c_str());
        std::fprintf(stderr, "fuzz smoke %s: FINDING: an input ran longer than %.0f s; it is in %s\n",
                     name.c_str(), options.input_timeout_s, path.c_str());
        std::_Exit(3);
      }
    }
  });

  auto run_one = [&](const std::string& input, const std::string& what) {
    g_current = &input;
    g_started_ns.store(now_ns());
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
    } catch (const std::exception& e) {
      const std::string path = (fs::path(options.artifacts) / (name + "-finding.bin")).string();
      write_current(path.c_str());
      std::fprintf(stderr, "fuzz smoke %s: FINDING on %s: unexpected exception: %s\n  input saved to %s\n",
                   name.c_str(), what.c_str(), e.what(), path.c_str());
      return false;
    } catch (...) {
      const std::string path = (fs::path(options.artifacts) / (name + "-finding.bin")).string();
      write_current(path.c_str());
      std::fprintf(stderr, "fuzz smoke %s: FINDING on %s: unexpected non-std exception\n  input saved to %s\n",
                   name.c_str(), what.c_str(), path.c_str());
      return false;
    }
    g_started_ns.store(0);
    return true;
  };

  int status = 0;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < seeds.size() && status == 0; ++i) {
    if (!run_one(seeds[i], "seed " + seed_names[i])) status = 1;
  }
  long long mutations = 0;
  Rng rng(options.seed);
  const auto budget = std::chrono::duration<double>(options.seconds);
  while (status == 0) {
    if (options.runs >= 0 ? mutations >= options.runs : Clock::now() - start >= budget) break;
    std::string input = seeds[rng.below(seeds.size())];
    const std::size_t count = 1 + rng.below(rng.below(4) == 0 ? 8 : 3);
    for (std::size_t m = 0; m < count; ++m) mutate_once(input, seeds, rng);
    if (input.size() > options.max_len) input.resize(options.max_len);
    ++mutations;
    if (!run_one(input, "mutation " + std::to_string(mutations) + " (--seed " +
                            std::to_string(options.seed) + " --runs " + std::to_string(mutations) + ")")) {
      status = 1;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done.store(true);
  watchdog.join();
  std::printf("fuzz smoke %s: %lld executions (%zu seeds + %lld mutations) in %.2f s (%.0f/s)%s\n",
              name.c_str(), static_cast<long long>(seeds.size()) + mutations, seeds.size(), mutations,
              seconds, (static_cast<double>(seeds.size()) + static_cast<double>(mutations)) / std::max(seconds, 1e-9),
              status == 0 ? "" : ": FAILED");
  return status;
}
