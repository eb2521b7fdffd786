#include "collectives/testing/collective_checks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "collectives/half.h"

namespace elastic::collectives::testing {
namespace {

void StoreValue(DataType type, void* data, size_t i, double value) {
  switch (type) {
    case DataType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      return;
    case DataType::kFloat64:
      static_cast<double*>(data)[i] = value;
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value);
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(static_cast<float>(value));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(static_cast<float>(value));
      return;
  }
}

double LoadValue(DataType type, const void* data, size_t i) {
  switch (type) {
    case DataType::kFloat32:
      return static_cast<const float*>(data)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(data)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
  }
  return 0;
}

double Tolerance(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 1e-5;
    case DataType::kFloat64:
      return 1e-12;
    case DataType::kInt64:
      return 0;
    case DataType::kFloat16:
      return 1e-2;
    case DataType::kBFloat16:
      return 5e-2;
  }
  return 0;
}

[[noreturn]] void Fail(const Communicator& comm, const std::string& op, DataType type, size_t count,
                       size_t i, double got, double expected) {
  std::ostringstream out;
  out << "rank " << comm.rank() << "/" << comm.size() << ": " << op << " " << DataTypeName(type)
      << " x" << count << ": element " << i << " is " << got << ", expected " << expected;
  throw std::runtime_error(out.str());
}

void Expect(const Communicator& comm, const std::string& op, DataType type, size_t count,
            const void* data, size_t i, double expected) {
  const double got = LoadValue(type, data, i);
  if (std::fabs(got - expected) > Tolerance(type)) Fail(comm, op, type, count, i, got, expected);
}

void CheckAllreduce(Communicator& comm, DataType type, size_t count, ReduceOp op) {
  std::vector<uint8_t> buffer(count * ElementSize(type) + 1);
  for (size_t i = 0; i < count; ++i) StoreValue(type, buffer.data(), i, InputValue(comm.rank(), i));
  comm.Allreduce(buffer.data(), count, type, op);
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < comm.size(); ++r) sum += InputValue(r, i);
    double expected = sum;
    if (op == ReduceOp::kAverage) {
      expected = type == DataType::kInt64
                     ? static_cast<double>(static_cast<int64_t>(sum) / comm.size())
                     : sum / comm.size();
    }
    Expect(comm, std::string("allreduce ") + ReduceOpName(op), type, count, buffer.data(), i,
           expected);
  }
}

void CheckBroadcast(Communicator& comm, DataType type, size_t count) {
  const int root = comm.size() - 1;
  std::vector<uint8_t> buffer(count * ElementSize(type) + 1);
  for (size_t i = 0; i < count; ++i) {
    StoreValue(type, buffer.data(), i, comm.rank() == root ? InputValue(root, i) : -7.0);
  }
  comm.Broadcast(buffer.data(), count, type, root);
  for (size_t i = 0; i < count; ++i) {
    Expect(comm, "broadcast", type, count, buffer.data(), i, InputValue(root, i));
  }
}

void CheckAllgather(Communicator& comm, DataType type, size_t count) {
  const size_t element = ElementSize(type);
  std::vector<uint8_t> input(count * element + 1);
  std::vector<uint8_t> output(count * element * comm.size() + 1);
  for (size_t i = 0; i < count; ++i) StoreValue(type, input.data(), i, InputValue(comm.rank(), i));
  comm.Allgather(input.data(), output.data(), count, type);
  for (int r = 0; r < comm.size(); ++r) {
    for (size_t i = 0; i < count; ++i) {
      Expect(comm, "allgather", type, count, output.data(), r * count + i, InputValue(r, i));
    }
  }
}

}  // namespace

double InputValue(int rank, size_t i) { return static_cast<double>((i * 7 + rank * 3) % 11) - 5; }

std::vector<DataType> AllDataTypes() {
  return {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
          DataType::kInt64};
}

void CheckAllOps(Communicator& comm, const std::vector<DataType>& types,
                 const std::vector<size_t>& counts) {
  for (DataType type : types) {
    for (size_t count : counts) {
      CheckAllreduce(comm, type, count, ReduceOp::kSum);
      CheckAllreduce(comm, type, count, ReduceOp::kAverage);
      CheckBroadcast(comm, type, count);
      CheckAllgather(comm, type, count);
    }
  }
  comm.Barrier();
}

void CheckAsyncOverlap(Communicator& comm) {
  constexpr int kOps = 4;
  constexpr size_t kCount = 100003;
  std::vector<std::vector<float>> buffers(kOps, std::vector<float>(kCount));
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k) {
    for (size_t i = 0; i < kCount; ++i)
      buffers[k][i] = static_cast<float>(InputValue(comm.rank(), i + k));
    works.push_back(
        comm.AllreduceAsync(buffers[k].data(), kCount, DataType::kFloat32, ReduceOp::kSum));
  }
  for (int k = kOps - 1; k >= 0; --k) works[k]->Wait();
  for (int k = 0; k < kOps; ++k) {
    if (!works[k]->IsCompleted()) throw std::runtime_error("waited work not completed");
    for (size_t i = 0; i < kCount; ++i) {
      double sum = 0;
      for (int r = 0; r < comm.size(); ++r) sum += InputValue(r, i + k);
      Expect(comm, "async allreduce", DataType::kFloat32, kCount, buffers[k].data(), i, sum);
    }
  }
}

void CheckLarge(Communicator& comm, bool every_type) {
  constexpr size_t kBytes = 64u << 20;
  CheckAllreduce(comm, DataType::kFloat32, kBytes / 4, ReduceOp::kSum);
  CheckBroadcast(comm, DataType::kFloat32, kBytes / 4);
  CheckAllgather(comm, DataType::kFloat32, kBytes / 4 / comm.size());
  if (!every_type) return;
  // The other types at 64 MiB too; 64 MiB is not a multiple of 3 elements.
  for (DataType type :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64, DataType::kInt64}) {
    CheckAllreduce(comm, type, kBytes / ElementSize(type), ReduceOp::kAverage);
  }
}

}  // namespace elastic::collectives::testing
