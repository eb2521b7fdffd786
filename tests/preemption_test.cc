// --preemption-notice end to end: a node that joined a real job watches a
// loopback server answering as GCE's or AWS's metadata server does. When the
// notice appears, the node drains its worker, which leaves at the epoch
// boundary; the job goes on with the others and finishes.
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/job_checks.h"
#include "tests/process.h"
#include "trainer/elastic/testing/fake_metadata_server.h"

namespace {

using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::Process;
using elastic::trainer::testing::FakeMetadataServer;

constexpr char kBinary[] = "trainer/cifar";

void JoinerLeavesOnItsNotice(FakeMetadataServer::Cloud cloud, const std::string& kind,
                             const std::string& notice) {
  FakeMetadataServer metadata(cloud);
  const std::string dir = FreshTempDir("preempt-" + kind);
  Process driver(
      {kBinary, "--workers=2", "--model=resnet8", "--dataset=fashion-mnist", "--train-samples=2048",
       "--test-samples=500", "--epochs=6", "--batch-size=32", "--lr=0.05", "--warmup-epochs=0",
       "--seed=1", "--loader-threads=1", "--commit-every=8", "--token-file=" + dir + "/token"},
      dir + "/driver.log");
  const std::smatch port =
      driver.WaitFor("head listening on 127\\.0\\.0\\.1:(\\d+)", std::chrono::seconds(60));
  ASSERT_FALSE(port.empty()) << driver.Output();
  Process node(
      {kBinary, "--join=127.0.0.1:" + port[1].str(), "--workers=1",
       "--token-file=" + dir + "/token", "--preemption-notice=" + kind + ":" + metadata.url()},
      dir + "/join.log");
  ASSERT_FALSE(
      driver.WaitFor("driver: generation \\d+: 3 workers", std::chrono::seconds(240)).empty())
      << driver.Output() << node.Output();
  EXPECT_GT(metadata.queries(), 0) << node.Output();
  metadata.Notify();
  EXPECT_EQ(node.Wait(std::chrono::seconds(240)), 0) << node.Output();
  ASSERT_EQ(driver.Wait(std::chrono::seconds(240)), 0) << driver.Output();
  const std::string job = driver.Output();
  const std::string output = job + node.Output();
  EXPECT_NE(output.find("join: watching " + kind + " (" + metadata.url() + ")"), std::string::npos)
      << output;
  EXPECT_NE(output.find("join: preemption notice (" + notice), std::string::npos) << output;
  // The node's worker left at a boundary and the others went on.
  const size_t leaving = job.find("is leaving (preemption notice)");
  ASSERT_NE(leaving, std::string::npos) << output;
  EXPECT_NE(job.find("epoch 6/6 world 2", leaving), std::string::npos) << output;
  EXPECT_NE(job.find("done: 6 epochs"), std::string::npos) << output;
  ExpectOneChecksumPerGeneration(output);
}

TEST(PreemptionTest, GceNoticeDrainsTheNodesWorkers) {
  JoinerLeavesOnItsNotice(FakeMetadataServer::Cloud::kGce, "gce",
                          "GCE: instance/preempted is TRUE");
}

TEST(PreemptionTest, AwsNoticeDrainsTheNodesWorkers) {
  JoinerLeavesOnItsNotice(FakeMetadataServer::Cloud::kAws, "aws",
                          "AWS spot instance-action {\"action\": \"terminate\"");
}

}  // namespace
