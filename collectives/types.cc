#include "collectives/types.h"

namespace elastic::collectives {

size_t ElementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
  }
  throw std::invalid_argument("unknown DataType " + std::to_string(static_cast<int>(type)));
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
  }
  return "unknown";
}

}  // namespace elastic::collectives
