// Allreduce bandwidth of the Gloo backend between real processes on this
// machine, beside the memcpy bandwidth of the same buffer, and the latency of a
// rebuild (destroy + rendezvous of a new generation + first allreduce).
//
//   bazel run //bench:allreduce_bench
//   bazel run //bench:allreduce_bench -- --ranks=2,4 --max_mb=256 --rebuild_ranks=2,4,8
//
// time is per allreduce (mean over iterations, rank 0's view after a barrier);
// algbw = bytes / time and busbw = algbw * 2(n-1)/n as nccl-tests define them.
// The processes rendezvous through a runtime head hosted by this process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/gloo_communicator.h"
#include "collectives/testing/subprocess.h"
#include "collectives/testing/test_store.h"

namespace elastic::collectives {
namespace {

using Clock = std::chrono::steady_clock;
using Args = std::map<std::string, std::string>;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::stoi(item));
  return values;
}

int Iterations(size_t bytes) {
  // About 1 GiB moved per size, between 3 and 50 iterations.
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 3, 50));
}

double MemcpyGBps(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in
  const int iterations = Iterations(bytes);
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    src[i % bytes] = static_cast<char>(i);  // keep the copy from being elided
    std::memcpy(dst.data(), src.data(), bytes);
  }
  const double t = Seconds(Clock::now() - start) / iterations;
  if (dst[0] == 42) std::printf(" ");
  return bytes / t / 1e9;
}

// One rank of the bandwidth run; rank 0 prints the rows.
int RunBandwidthRank(const Args& args) {
  const int rank = std::stoi(args.at("rank")), world = std::stoi(args.at("world"));
  const size_t max_bytes = std::stoul(args.at("max_mb")) << 20;
  auto store = testing::OpenStore(args.at("store"), "bench-" + std::to_string(rank));
  GlooOptions options;
  options.default_timeout = std::chrono::seconds(600);
  // Each run uses its own generation: keys of an earlier run must not be read.
  auto comm = GlooCommunicatorFactory(*store, options)
                  .Create({std::stoull(args.at("generation")), rank, world});
  std::vector<float> data(max_bytes / 4, 1.0f);
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const size_t count = bytes / 4;
    const int iterations = Iterations(bytes);
    // Warm-up: small messages get many rounds (cheap), large ones one.
    const int warmup = bytes <= (1u << 20) ? 100 : 1;
    for (int i = 0; i < warmup; ++i) {
      comm->Allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    comm->Barrier();
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      comm->Allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    const double t = Seconds(Clock::now() - start) / iterations;
    comm->Barrier();
    if (rank == 0) {
      const double algbw = bytes / t / 1e9;
      const double busbw = algbw * 2.0 * (world - 1) / world;
      const double memcpy_bw = MemcpyGBps(bytes);
      std::printf("%5d %10zu %12.1f %10.3f %10.3f %12.3f %9.1f%%\n", world, bytes, t * 1e6, algbw,
                  busbw, memcpy_bw, 100.0 * busbw / memcpy_bw);
      std::fflush(stdout);
      std::ofstream(args.at("results"), std::ios::app)
          << "bandwidth " << world << " " << bytes << " " << busbw << " " << memcpy_bw << "\n";
    }
  }
  return 0;
}

// One rank of the rebuild run: `cycles` generations, each timed from the
// destruction of the previous communicator to the end of the first allreduce.
int RunRebuildRank(const Args& args) {
  const int rank = std::stoi(args.at("rank")), world = std::stoi(args.at("world"));
  const int cycles = std::stoi(args.at("cycles"));
  const uint64_t base = std::stoull(args.at("generation"));
  auto store = testing::OpenStore(args.at("store"), "bench-" + std::to_string(rank));
  GlooCommunicatorFactory factory(*store);
  auto comm = factory.Create({base, rank, world});
  float x = 1;
  comm->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
  std::vector<double> samples;
  for (int c = 1; c <= cycles; ++c) {
    comm->Barrier();  // everyone starts the rebuild together
    const auto start = Clock::now();
    comm.reset();
    comm = factory.Create({base + c, rank, world});
    comm->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    samples.push_back(Seconds(Clock::now() - start) * 1e3);
  }
  // The slowest member decides when the group can go on.
  std::vector<double> slowest(samples);
  comm->Allreduce(slowest.data(), slowest.size(), DataType::kFloat64, ReduceOp::kSum);
  std::vector<double> all(samples.size() * world);
  comm->Allgather(samples.data(), all.data(), samples.size(), DataType::kFloat64);
  if (rank == 0) {
    std::vector<double> worst(samples.size(), 0);
    for (int r = 0; r < world; ++r)
      for (size_t c = 0; c < samples.size(); ++c)
        worst[c] = std::max(worst[c], all[r * samples.size() + c]);
    std::sort(worst.begin(), worst.end());
    std::printf("%5d %8d %12.1f %12.1f %12.1f\n", world, cycles, worst[worst.size() / 2],
                worst.front(), worst.back());
    std::fflush(stdout);
    std::ofstream(args.at("results"), std::ios::app)
        << "rebuild " << world << " " << worst[worst.size() / 2] << "\n";
  }
  return 0;
}

bool RunWorld(const std::string& role, int world, const Args& extra) {
  std::vector<testing::ChildProcess> children;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {"--child", role, "rank=" + std::to_string(rank),
                                     "world=" + std::to_string(world)};
    for (const auto& [k, v] : extra) argv.push_back(k + "=" + v);
    children.push_back(testing::ChildProcess::SpawnSelf(argv));
  }
  bool ok = true;
  for (auto& child : children) {
    auto status = child.WaitFor(std::chrono::minutes(30));
    if (!status || !testing::ExitedCleanly(*status)) {
      std::fprintf(stderr, "a rank failed: %s\n",
                   status ? testing::DescribeStatus(*status).c_str() : "hung");
      ok = false;
    }
  }
  return ok;
}

int Main(int argc, char** argv) {
  Args flags = {{"ranks", "2,4"}, {"max_mb", "256"}, {"rebuild_ranks", "2,4,8"}, {"cycles", "10"}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.find('=') == std::string::npos) {
      std::fprintf(stderr,
                   "usage: allreduce_bench [--ranks=2,4] [--max_mb=256] "
                   "[--rebuild_ranks=2,4,8] [--cycles=10]\n");
      return 2;
    }
    const auto eq = arg.find('=');
    const std::string key = arg.substr(2, eq - 2);
    if (flags.count(key) == 0) {
      std::fprintf(stderr, "unknown flag --%s\n", key.c_str());
      return 2;
    }
    flags[key] = arg.substr(eq + 1);
  }
  testing::TestHead head;
  const std::string results = testing::MakeTempDir("allreduce_bench_") + "/results";
  std::printf("Gloo allreduce (float32 sum, in place) between processes on this machine\n");
  std::printf("%5s %10s %12s %10s %10s %12s %10s\n", "ranks", "bytes", "time_us", "algbw_GB/s",
              "busbw_GB/s", "memcpy_GB/s", "busbw/memcpy");
  std::fflush(stdout);
  uint64_t generation = 1;
  for (int world : ParseList(flags["ranks"])) {
    if (!RunWorld("bandwidth", world,
                  {{"store", head.spec()},
                   {"max_mb", flags["max_mb"]},
                   {"results", results},
                   {"generation", std::to_string(generation++)}})) {
      return 1;
    }
  }
  std::printf(
      "\nRebuild latency (destroy + rendezvous of a new generation + first allreduce),\n"
      "slowest member per cycle, ms\n");
  std::printf("%5s %8s %12s %12s %12s\n", "ranks", "cycles", "median_ms", "min_ms", "max_ms");
  std::fflush(stdout);
  generation = 100;
  for (int world : ParseList(flags["rebuild_ranks"])) {
    if (!RunWorld("rebuild", world,
                  {{"store", head.spec()},
                   {"cycles", flags["cycles"]},
                   {"results", results},
                   {"generation", std::to_string(generation)}})) {
      return 1;
    }
    generation += 1000;
  }
  // Headline: the largest world's busbw at the largest size against memcpy, and
  // the largest world's rebuild.
  std::ifstream in(results);
  std::string kind;
  double best_busbw = 0, best_memcpy = 1, rebuild_ms = 0;
  int bw_world = 0, rebuild_world = 0;
  size_t bw_bytes = 0;
  while (in >> kind) {
    if (kind == "bandwidth") {
      int world;
      size_t bytes;
      double busbw, memcpy_bw;
      in >> world >> bytes >> busbw >> memcpy_bw;
      if (world > bw_world || (world == bw_world && bytes >= bw_bytes)) {
        bw_world = world, bw_bytes = bytes, best_busbw = busbw, best_memcpy = memcpy_bw;
      }
    } else {
      int world;
      double ms;
      in >> world >> ms;
      if (world >= rebuild_world) rebuild_world = world, rebuild_ms = ms;
    }
  }
  std::printf(
      "\nheadline: %d ranks x %zu MiB allreduce busbw %.3f GB/s = %.1f%% of memcpy "
      "(%.1f GB/s); rebuild of %d ranks %.1f ms (median)\n",
      bw_world, bw_bytes >> 20, best_busbw, 100.0 * best_busbw / best_memcpy, best_memcpy,
      rebuild_world, rebuild_ms);
  return 0;
}

}  // namespace
}  // namespace elastic::collectives

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") {
    elastic::collectives::Args args;
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq != std::string::npos) args[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    try {
      const std::string role = argv[2];
      return role == "bandwidth" ? elastic::collectives::RunBandwidthRank(args)
                                 : elastic::collectives::RunRebuildRank(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank failed: %s\n", e.what());
      return 1;
    }
  }
  return elastic::collectives::Main(argc, argv);
}
