// Gloo is wired in: two ranks in two threads rendezvous through a file store and
// allreduce over the TCP transport on loopback.
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

TEST(GlooTest, TwoThreadsAllreduceOverTcp) {
  char dir_template[] = "/tmp/gloo_store_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  constexpr int kWorld = 2;
  constexpr int kCount = 1000;
  std::vector<std::vector<float>> data(kWorld, std::vector<float>(kCount));
  for (int rank = 0; rank < kWorld; ++rank)
    for (int i = 0; i < kCount; ++i) data[rank][i] = static_cast<float>(i * (rank + 1));

  auto run = [&](int rank) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
    context->connectFullMesh(store, device);
    std::vector<float*> ptrs = {data[rank].data()};
    gloo::AllreduceRing<float> allreduce(context, ptrs, kCount);
    allreduce.run();
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (int rank = 0; rank < kWorld; ++rank)
    for (int i = 0; i < kCount; ++i) ASSERT_EQ(data[rank][i], static_cast<float>(i * 3));
}
