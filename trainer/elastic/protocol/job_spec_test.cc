#include "trainer/elastic/protocol/job_spec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

// Both scopes that travel, as --name=value text, of `job`.
std::map<std::string, std::string> JobValues(JobSettings job) {
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, job.train);
  RegisterElasticFlags(flags, job.elastic);
  std::map<std::string, std::string> values = flags.Values(FlagScope::kTraining);
  for (const auto& [name, value] : flags.Values(FlagScope::kElastic)) values[name] = value;
  return values;
}

// A command line that gives every flag of the training and elastic scopes a
// value other than its default.
std::vector<std::string> EveryJobFlagChanged() {
  JobSettings defaults;
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, defaults.train);
  RegisterElasticFlags(flags, defaults.elastic);
  std::vector<std::string> args;
  for (const FlagSet::Described& flag : flags.Describe()) {
    if (flag.scope == FlagScope::kProcess) continue;
    const std::string now = flags.Values(flag.scope).at(flag.name);
    switch (flag.kind) {
      case 'b':
        args.push_back(now == "true" ? "--no-" + flag.name : "--" + flag.name);
        break;
      case 'i':
        args.push_back("--" + flag.name + "=" + std::to_string(std::stoll(now) + 7));
        break;
      case 'd':
        args.push_back("--" + flag.name + "=" + std::to_string(std::stod(now) + 0.25));
        break;
      default:
        if (flag.choices.empty()) {
          args.push_back("--" + flag.name + "=x-" + flag.name);
        } else {
          for (const std::string& choice : flag.choices) {
            if (choice == now) continue;
            args.push_back("--" + flag.name + "=" + choice);
            break;
          }
        }
    }
  }
  return args;
}

TEST(JobSpecTest, EveryFlagOfTheJobTravelsAndComesBackAsItWas) {
  const JobSettings sent = SettingsFromFlags(EveryJobFlagChanged());
  const std::map<std::string, std::string> before = JobValues(sent);
  // The test has teeth: every one of them differs from its default.
  const std::map<std::string, std::string> defaults = JobValues(JobSettings());
  ASSERT_EQ(before.size(), defaults.size());
  EXPECT_EQ(before.size(), 52u + 17u);
  for (const auto& [name, value] : before) EXPECT_NE(value, defaults.at(name)) << "--" << name;

  const std::string bytes = EncodeJobSpec("job-7", sent);
  const kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(bytes.data()),
                                              bytes.size() / sizeof(capnp::word));
  capnp::FlatArrayMessageReader reader(words);
  const proto::JobSpec::Reader spec = reader.getRoot<proto::JobSpec>();
  EXPECT_EQ(std::string(spec.getJobId().cStr()), "job-7");
  JobSettings received;
  received.train = ReadTrainSpec(spec.getTrain());
  ReadElasticSpec(spec.getElastic(), &received.elastic);
  const std::map<std::string, std::string> after = JobValues(received);
  for (const auto& [name, value] : before) EXPECT_EQ(after.at(name), value) << "--" << name;
}

TEST(JobSpecTest, AProcessOwnFlagsNeverTravel) {
  const JobSettings sent = SettingsFromFlags({"--workers=4", "--port=6380", "--token-file=/t",
                                              "--listen=0.0.0.0", "--run-dir=/r", "--lr=0.2"});
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<proto::JobSpec>();
  WriteTrainSpec(sent.train, spec.initTrain());
  WriteElasticSpec(sent.elastic, spec.initElastic());
  ElasticOptions received;
  received.port = 1;  // this process's own: left as it is
  ReadElasticSpec(spec.getElastic(), &received);
  EXPECT_EQ(received.port, 1);
  EXPECT_EQ(received.workers, 0);
  EXPECT_EQ(received.token_file, "");
  EXPECT_EQ(received.listen, ElasticOptions().listen);
  EXPECT_EQ(ReadTrainSpec(spec.getTrain()).lr, 0.2);
}

TEST(JobSpecTest, ATakeoverSeesOnlyTheJobFlagsItsCommandLineGaveOtherwise) {
  const JobSettings job = SettingsFromFlags({"--model=resnet8", "--lr=0.05", "--commit-every=5"});
  // Not given: the command line's defaults are no change, even where they
  // differ from the job's (--model, --commit-every).
  const std::vector<std::string> line_args = {"--lr=0.2", "--port=7000", "--epochs=200",
                                              "--min-workers=2"};
  const JobSettings line = SettingsFromFlags(line_args);
  const std::vector<FlagChange> changes =
      ChangesToJob(job, line, {"lr", "port", "epochs", "min-workers"});
  ASSERT_EQ(changes.size(), 2u);  // --epochs=200 is the job's value too
  EXPECT_EQ(changes[0].name, "lr");
  EXPECT_EQ(changes[0].job_value, "0.05");
  EXPECT_EQ(changes[0].given_value, "0.2");
  EXPECT_EQ(changes[1].name, "min-workers");
  EXPECT_EQ(RefusalOfChanges(changes, "/s"), "");

  const std::vector<FlagChange> model =
      ChangesToJob(job, SettingsFromFlags({"--model=resnet18"}), {"model"});
  ASSERT_EQ(model.size(), 1u);
  const std::string refusal = RefusalOfChanges(model, "/s");
  EXPECT_NE(refusal.find("--model=resnet18 is not the job's (--model=resnet8) in --state-dir /s"),
            std::string::npos)
      << refusal;
}

}  // namespace
}  // namespace elastic::trainer
