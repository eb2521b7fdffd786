// Element types, reduction operators and errors shared by every backend. Kept free
// of any backend or LibTorch header so that callers holding raw buffers (and the
// runtime) can use the Communicator interface without pulling those in.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace elastic::collectives {

enum class DataType {
  kFloat32,
  kFloat16,   // IEEE 754 binary16
  kBFloat16,  // the upper half of a float32
  kFloat64,
  kInt64,
};

enum class ReduceOp {
  kSum,
  // Sum divided by the world size. For kInt64 the quotient is truncated toward zero.
  kAverage,
};

size_t ElementSize(DataType type);
const char* DataTypeName(DataType type);
const char* ReduceOpName(ReduceOp op);

// Every operation carries a timeout; zero means "the communicator's default".
using Timeout = std::chrono::milliseconds;
inline constexpr Timeout kDefaultTimeout{0};

// Base of every error an operation reports. After any CollectiveError the
// communicator is broken (its peers may be mid-operation): every later operation
// fails too, and the caller rebuilds a new communicator for a new generation.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operation did not complete within its timeout.
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// Abort() was called on this communicator (before or during the operation).
class CollectiveAborted : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// A backend cannot do what was asked (e.g. MPI asked to rebuild for a new world).
class UnsupportedOperation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace elastic::collectives
