// --preemption-notice end to end: a node that joined a real job watches a
// loopback server answering as GCE's or AWS's metadata server does. When the
// notice appears, the node drains its worker, which leaves at the epoch
// boundary; the job goes on with the others and finishes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/elastic_job.h"
#include "tests/job_checks.h"
#include "tests/job_events.h"
#include "tests/process.h"
#include "trainer/elastic/testing/fake_metadata_server.h"

namespace {

using elastic::tests::ExpectOneChecksumPerGeneration;
using elastic::tests::FreshTempDir;
using elastic::tests::JobEvent;
using elastic::tests::JobEvents;
using elastic::tests::Process;
using elastic::tests::WaitForEvent;
using elastic::trainer::testing::FakeMetadataServer;

constexpr char kBinary[] = "examples/cifar/cifar";

void JoinerLeavesOnItsNotice(FakeMetadataServer::Cloud cloud, const std::string& kind,
                             const std::string& notice) {
  FakeMetadataServer metadata(cloud);
  const std::string dir = FreshTempDir("preempt-" + kind);
  const std::string run_dir = dir + "/run";
  Process driver({kBinary, "--workers=2", "--model=resnet8", "--dataset=fashion-mnist",
                  "--train-samples=2048", "--test-samples=500", "--epochs=6", "--batch-size=32",
                  "--lr=0.05", "--warmup-epochs=0", "--seed=1", "--loader-threads=1",
                  "--commit-every=8", "--token-file=" + dir + "/token", "--run-dir=" + run_dir},
                 dir + "/driver.log");
  const JobEvent start = WaitForEvent(run_dir, std::chrono::seconds(60),
                                      [](const JobEvent& e) { return e["event"] == "start"; });
  ASSERT_FALSE(start.is_null()) << driver.Output();
  Process node(
      {kBinary, "--join=" + start["head"].get<std::string>(), "--workers=1",
       "--token-file=" + dir + "/token", "--preemption-notice=" + kind + ":" + metadata.url()},
      dir + "/join.log");
  const JobEvent view_of_three = WaitForEvent(
      run_dir, std::chrono::seconds(240),
      [](const JobEvent& e) { return e["event"] == "view" && e["members"].size() == 3; });
  ASSERT_FALSE(view_of_three.is_null())
      << driver.Output() << node.Output() << JobEvents::Read(run_dir).Text();
  EXPECT_GT(metadata.queries(), 0) << node.Output();
  metadata.Notify();
  EXPECT_EQ(node.Wait(std::chrono::seconds(240)), 0) << node.Output();
  ASSERT_EQ(driver.Wait(std::chrono::seconds(240)), 0) << driver.Output();
  const std::string output = driver.Output() + node.Output();
  const JobEvents events = JobEvents::Read(run_dir);
  // What the node's agent said: the event log is the driver's.
  EXPECT_NE(output.find("join: watching " + kind + " (" + metadata.url() + ")"), std::string::npos)
      << output;
  EXPECT_NE(output.find("join: preemption notice (" + notice), std::string::npos) << output;
  // The node's worker (the one member that joined from another node than the
  // driver's own, node 1) drained, left at a boundary, and the others went on.
  std::vector<JobEvent> joined;
  for (const JobEvent& j : events.Of("join"))
    if (j["node"] != 1) joined.push_back(j);
  ASSERT_EQ(joined.size(), 1u) << events.Text();
  const JobEvent joiner = joined[0]["member"];  // its member id
  const std::vector<JobEvent> synced = events.Of("params");
  EXPECT_TRUE(std::any_of(synced.begin(), synced.end(),
                          [&](const JobEvent& p) { return p["member"] == joiner; }))
      << "member " << joiner << " never synced\n"
      << events.Text();
  const std::vector<JobEvent>& all = events.all();
  auto draining = std::find_if(all.begin(), all.end(),
                               [](const JobEvent& e) { return e["event"] == "draining"; });
  ASSERT_NE(draining, all.end()) << events.Text();
  EXPECT_EQ((*draining)["member"], joiner) << events.Text();
  EXPECT_TRUE(std::any_of(draining, all.end(),
                          [](const JobEvent& e) {
                            return e["event"] == "epoch" && e["epoch"] == 6 && e["epochs"] == 6 &&
                                   e["world"] == 2;
                          }))
      << "no epoch 6/6 at world 2 after the draining\n"
      << events.Text();
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const JobEvent& e) {
    return e["event"] == "done" && e["epochs"] == 6;
  })) << events.Text();
  ExpectOneChecksumPerGeneration(events);
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
