// The typed exception hierarchy of aiacc-train. Every error carries its context (config key and
// line, data file and line, peer rank and operation) in its message; the program maps the type
// to an exit status (ConfigError -> 2, everything else -> 1).
#pragma once

#include <stdexcept>
#include <string>

namespace aiacc {

// Base of every error we throw on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Bad configuration or command-line usage: the message names file:line: key.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Bad or unreadable input data: the message names the file (and line or record).
class DataError : public Error {
 public:
  using Error::Error;
};

// Filesystem or OS failure (open, write, rename, syscall).
class IoError : public Error {
 public:
  using Error::Error;
};

// Communication failure with a peer: the message names the peer rank and the operation.
class CommError : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline. A CommError, so callers that handle peers catch both.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// CUDA, cuBLAS, cuDNN or NCCL reported a failure.
class CudaError : public Error {
 public:
  using Error::Error;
};

// A memory allocation could not be served (device memory, pinned host memory): the message
// names the memory, the request and what the allocator holds.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// An internal invariant did not hold (AIACC_CHECK): a bug in aiacc-train, not in the input.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace aiacc
