#include "ring/nccl/detail/nccl_comm_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"

namespace aiacc::ring::detail {

void PollBackoff::wait() {
  if (++polls_ <= 64) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
  sleep_us_ = std::min<long>(sleep_us_ * 2, 1000);
}

NcclCommGroup::NcclCommGroup(std::span<const ncclUniqueId> ids, int rank, int world_size,
                             std::string name, net::Deadline deadline)
    : rank_(rank), world_size_(world_size), name_(std::move(name)), comms_(ids.size(), nullptr) {
  AIACC_CHECK(!ids.empty(), "an NCCL communicator group needs at least one id");
  // Names and configs stay alive until init has completed: NCCL's background thread may read
  // them. reserve() keeps the names' c_str() pointers stable.
  comm_names_.reserve(ids.size());
  std::vector<ncclConfig_t> configs;
  configs.reserve(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {
    comm_names_.push_back(fmt::format("{}/{}", name_, k));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; we poll against the deadline
    config.commName = comm_names_[k].c_str();
    configs.push_back(config);
  }

  // One group so the K inits proceed together instead of each waiting for the peers in turn.
  const ncclResult_t start_status = ncclGroupStart();
  if (start_status != ncclSuccess) {
    fail("init", fmt::format("ncclGroupStart returned {}", ncclGetErrorString(start_status)));
  }
  ncclResult_t init_status = ncclSuccess;
  std::size_t init_failed = 0;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    ncclUniqueId id = ids[k];
    const ncclResult_t status =
        ncclCommInitRankConfig(&comms_[k], world_size_, id, rank_, &configs[k]);
    if (status != ncclSuccess && status != ncclInProgress) {
      init_status = status;
      init_failed = k;
      break;
    }
  }
  // Always close the group, even after a failure, so this thread's NCCL group depth is restored.
  const ncclResult_t end_status = ncclGroupEnd();
  if (init_status != ncclSuccess) {
    fail("init", fmt::format("ncclCommInitRankConfig of communicator {} returned {}", init_failed,
                             describe(init_status, init_failed)));
  }
  if (end_status != ncclSuccess && end_status != ncclInProgress) {
    fail("init", fmt::format("ncclGroupEnd returned {}", describe(end_status, 0)));
  }
  for (std::size_t k = 0; k < comms_.size(); ++k) {
    if (comms_[k] == nullptr) fail("init", fmt::format("NCCL returned no communicator {}", k));
  }
  wait_ready("init", deadline);
}

NcclCommGroup::~NcclCommGroup() { finalize_and_destroy(); }

std::string NcclCommGroup::where() const {
  return fmt::format("rank {} of {}, NCCL '{}'", rank_, world_size_, name_);
}

std::string NcclCommGroup::describe(ncclResult_t result, std::size_t k) const {
  const char* last = ncclGetLastError(k < comms_.size() ? comms_[k] : nullptr);
  if (last == nullptr || *last == '\0') return ncclGetErrorString(result);
  return fmt::format("{} ({})", ncclGetErrorString(result), last);
}

bool NcclCommGroup::poll(std::string_view op) {
  if (aborted_) {
    throw CommError(fmt::format("{}: NCCL {} on communicators aborted earlier ({})", where(), op,
                                abort_reason_));
  }
  bool ready = true;
  for (std::size_t k = 0; k < comms_.size(); ++k) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t status = ncclCommGetAsyncError(comms_[k], &state);
    if (status != ncclSuccess) {
      fail(op, fmt::format("ncclCommGetAsyncError on communicator {} returned {}", k,
                           describe(status, k)));
    }
    if (state == ncclInProgress) {
      ready = false;
    } else if (state != ncclSuccess) {
      fail(op, fmt::format("communicator {} reported {}", k, describe(state, k)));
    }
  }
  return ready;
}

void NcclCommGroup::wait_ready(std::string_view op, net::Deadline deadline) {
  const auto start = net::Clock::now();
  PollBackoff backoff;
  while (!poll(op)) {
    if (net::Clock::now() >= deadline) {
      fail(op,
           fmt::format("did not complete by its deadline (waited {:.2f} s); is a peer missing, "
                       "slow, or using different NCCL ids?",
                       net::seconds_since(start)),
           /*timeout=*/true);
    }
    backoff.wait();
  }
}

void NcclCommGroup::abort(std::string_view reason) noexcept {
  if (aborted_) return;
  aborted_ = true;
  try {
    abort_reason_ = std::string(reason);
  } catch (...) {
    // Out of memory while recording the reason: abort anyway.
  }
  for (std::size_t k = 0; k < comms_.size(); ++k) {
    if (comms_[k] == nullptr) continue;
    const ncclResult_t status = ncclCommAbort(comms_[k]);
    comms_[k] = nullptr;
    if (status != ncclSuccess) {
      try {
        log::get("ring")->warn("{}: ncclCommAbort of communicator {} returned {}", where(), k,
                               ncclGetErrorString(status));
      } catch (...) {
        // Logging failed: nothing more to do in a noexcept path.
      }
    }
  }
}

void NcclCommGroup::fail(std::string_view op, std::string_view detail, bool timeout) {
  const std::string message =
      fmt::format("{}: NCCL {} {}: {}; aborted its {} communicator(s)", where(), op,
                  timeout ? "timed out" : "failed", detail, comms_.size());
  abort(message);
  if (timeout) throw TimeoutError(message);
  throw CommError(message);
}

void NcclCommGroup::finalize_and_destroy() noexcept {
  if (aborted_) return;
  if (std::uncaught_exceptions() > 0) {
    // Peers may have failed too; finalizing could wait for them until the teardown timeout.
    abort("destroyed while an exception was propagating");
    return;
  }
  try {
    try {
      for (std::size_t k = 0; k < comms_.size(); ++k) {
        const ncclResult_t status = ncclCommFinalize(comms_[k]);
        if (status != ncclSuccess && status != ncclInProgress) {
          fail("finalize", fmt::format("ncclCommFinalize of communicator {} returned {}", k,
                                       describe(status, k)));
        }
      }
      wait_ready("finalize", net::deadline_after(kTeardownTimeoutS));
    } catch (const Error& e) {
      // fail() has aborted every communicator already.
      log::get("ring")->warn("{}", e.what());
      return;
    }
    for (std::size_t k = 0; k < comms_.size(); ++k) {
      const ncclResult_t status = ncclCommDestroy(comms_[k]);
      if (status != ncclSuccess && status != ncclInProgress) {
        log::get("ring")->warn("{}: ncclCommDestroy of communicator {} returned {}", where(), k,
                               ncclGetErrorString(status));
      }
      comms_[k] = nullptr;
    }
  } catch (...) {
    abort("teardown failed");  // e.g. logging or formatting ran out of memory
  }
}

}  // namespace aiacc::ring::detail
