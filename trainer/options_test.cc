// Flag parsing and validation of the training flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer/flags.h"
#include "trainer/train_options.h"

namespace elastic::trainer {
namespace {

const std::vector<std::string> kModels = {"resnet8", "resnet18"};

// Parses `args` (without the program name) into fresh options.
TrainOptions Parse(std::vector<const char*> args) {
  TrainOptions options;
  FlagSet flags("cifar", "test");
  RegisterTrainFlags(flags, options);
  args.insert(args.begin(), "cifar");
  flags.Parse(static_cast<int>(args.size()), args.data());
  return options;
}

std::string ParseError(std::vector<const char*> args) {
  try {
    ValidateTrainOptions(Parse(std::move(args)), kModels);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

TEST(FlagsTest, DefaultsArePytorchCifarRecipe) {
  const TrainOptions o = Parse({});
  EXPECT_EQ(o.model, "resnet18");
  EXPECT_EQ(o.batch_size, 128);
  EXPECT_DOUBLE_EQ(o.lr, 0.1);
  EXPECT_DOUBLE_EQ(o.momentum, 0.9);
  EXPECT_DOUBLE_EQ(o.weight_decay, 5e-4);
  EXPECT_EQ(o.schedule, "cosine");
  EXPECT_EQ(o.epochs, 200);
  // Not pytorch-cifar's: its rate from the first step diverged (docs/training.md).
  EXPECT_DOUBLE_EQ(o.warmup_epochs, 5);
  EXPECT_NO_THROW(ValidateTrainOptions(o, kModels));
}

TEST(FlagsTest, ParsesBothSyntaxesAndBoolForms) {
  const TrainOptions o = Parse({"--lr=0.05", "--epochs", "3", "--nesterov", "--no-augment",
                                "--precision", "bf16", "--model", "resnet8", "--optimizer=adam"});
  EXPECT_DOUBLE_EQ(o.lr, 0.05);
  EXPECT_EQ(o.epochs, 3);
  EXPECT_TRUE(o.nesterov);
  EXPECT_FALSE(o.augment);
  EXPECT_EQ(o.precision, "bf16");
  EXPECT_EQ(o.memory_format, "auto");
  EXPECT_EQ(o.model, "resnet8");
  EXPECT_EQ(o.optimizer, "adam");
}

TEST(FlagsTest, RejectsUnknownFlagByName) {
  EXPECT_NE(ParseError({"--bogus=1"}).find("unknown flag --bogus"), std::string::npos);
  EXPECT_NE(ParseError({"--no-lr"}).find("unknown flag --no-lr"), std::string::npos);
  EXPECT_NE(ParseError({"positional"}).find("unexpected argument 'positional'"), std::string::npos);
}

TEST(FlagsTest, RejectsMalformedValues) {
  EXPECT_NE(ParseError({"--epochs=abc"}).find("--epochs=abc: expected an integer"),
            std::string::npos);
  EXPECT_NE(ParseError({"--lr=fast"}).find("--lr=fast: expected a finite number"),
            std::string::npos);
  EXPECT_NE(ParseError({"--lr=nan"}).find("expected a finite number"), std::string::npos);
  EXPECT_NE(ParseError({"--nesterov=maybe"}).find("expected true or false"), std::string::npos);
  EXPECT_NE(ParseError({"--optimizer=rmsprop"}).find("must be one of sgd, adam"),
            std::string::npos);
  EXPECT_NE(ParseError({"--epochs"}).find("--epochs needs a value"), std::string::npos);
}

TEST(FlagsTest, RejectsImpossibleValues) {
  EXPECT_NE(ParseError({"--lr=-0.1"}).find("--lr must be > 0"), std::string::npos);
  EXPECT_NE(ParseError({"--batch-size=0"}).find("--batch-size must be >= 1"), std::string::npos);
  EXPECT_NE(ParseError({"--epochs=0"}).find("--epochs"), std::string::npos);
  EXPECT_NE(ParseError({"--momentum=1.5"}).find("--momentum"), std::string::npos);
  EXPECT_NE(ParseError({"--label-smoothing=1"}).find("--label-smoothing"), std::string::npos);
  EXPECT_NE(ParseError({"--clip-grad=-1"}).find("--clip-grad"), std::string::npos);
  EXPECT_NE(ParseError({"--warmup-steps=-3"}).find("--warmup-steps"), std::string::npos);
  EXPECT_NE(ParseError({"--lookahead-alpha=0"}).find("--lookahead-alpha"), std::string::npos);
  EXPECT_NE(ParseError({"--optimizer=adam", "--nesterov"}).find("--nesterov needs --optimizer=sgd"),
            std::string::npos);
  EXPECT_NE(ParseError({"--resume"}).find("--resume needs --checkpoint-dir"), std::string::npos);
  EXPECT_NE(ParseError({"--min-lr=1"}).find("--min-lr"), std::string::npos);
  EXPECT_NE(ParseError({"--adam-beta2=1", "--optimizer=adamw"}).find("--adam-beta2"),
            std::string::npos);
  EXPECT_NE(ParseError({"--decay-steps=-1"}).find("--decay-steps"), std::string::npos);
  EXPECT_NE(ParseError({"--decay-steps=100", "--schedule=step"})
                .find("--decay-steps needs --schedule=cosine"),
            std::string::npos);
  EXPECT_NE(ParseError({"--decay-steps=100", "--warmup-steps=100"})
                .find("--decay-steps must be above --warmup-steps=100"),
            std::string::npos);
}

TEST(FlagsTest, UserDataNeedsItsDirectoryAndImageSizeItsDataSet) {
  EXPECT_NE(ParseError({"--dataset=npy"}).find("--data-dir is needed with --dataset=npy"),
            std::string::npos);
  EXPECT_NE(ParseError({"--dataset=image-folder"}).find("--data-dir is needed"), std::string::npos);
  EXPECT_NE(ParseError({"--image-size=64"}).find("--image-size applies to --dataset=image-folder"),
            std::string::npos);
  EXPECT_NE(ParseError({"--dataset=image-folder", "--data-dir=d", "--image-size=4"})
                .find("--image-size must be in [8, 4096]"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--dataset=image-folder", "--data-dir=d", "--image-size=64"}), "");
  EXPECT_NE(ParseError({"--dataset=imagenet"}).find("imagenet"), std::string::npos);
  EXPECT_NE(
      ParseError({"--image-index=0123"}).find("--image-index applies to --dataset=image-folder"),
      std::string::npos);
  EXPECT_NE(ParseError({"--image-index-dir=/tmp"})
                .find("--image-index-dir applies to --dataset=image-folder"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--dataset=image-folder", "--data-dir=d", "--image-index=0123",
                        "--image-index-dir=/tmp"}),
            "");
  // A WebDataset is images too: resized, indexed once, pinned.
  EXPECT_NE(ParseError({"--dataset=webdataset"})
                .find("--data-dir is needed with "
                      "--dataset=webdataset"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--dataset=webdataset", "--data-dir=d", "--image-size=64",
                        "--image-index=0123", "--image-index-dir=/tmp"}),
            "");
  EXPECT_NE(ParseError({"--dataset=npy", "--data-dir=d", "--image-size=64"})
                .find("--image-size applies to --dataset=image-folder or webdataset only"),
            std::string::npos);
}

TEST(FlagsTest, NormalizeIsThreeMeansAndThreePositiveDeviationsForImagesOnly) {
  const ChannelNormalization imagenet = ParseNormalize("0.485,0.456,0.406/0.229,0.224,0.225");
  EXPECT_EQ(imagenet.mean, (std::vector<float>{0.485f, 0.456f, 0.406f}));
  EXPECT_EQ(imagenet.std, (std::vector<float>{0.229f, 0.224f, 0.225f}));
  EXPECT_TRUE(ParseNormalize("").mean.empty());
  const auto error = [](const std::string& value) {
    const std::string flag = "--normalize=" + value;
    return ParseError({"--dataset=webdataset", "--data-dir=d", flag.c_str()});
  };
  EXPECT_EQ(error("0.5,0.5,0.5/0.25,0.25,0.25"), "");
  EXPECT_NE(error("0.5,0.5,0.5").find("expected three means, a slash"), std::string::npos);
  EXPECT_NE(error("0.5,0.5/0.2,0.2,0.2").find("expected 3 means (R,G,B), got 2"),
            std::string::npos);
  EXPECT_NE(error("0.5,0.5,0.5/0.2,0.2,0.2,0.2").find("expected 3 standard deviations"),
            std::string::npos);
  EXPECT_NE(error("0.5,x,0.5/0.2,0.2,0.2").find("mean 'x' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error("0.5,0.5,0.5/0.2,0.2,0.2x").find("'0.2x' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error("0.5,0.5,0.5/0.2,inf,0.2").find("'inf' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error("0.5,0.5,0.5/0.2,0,0.2").find("a standard deviation must be > 0, got 0"),
            std::string::npos);
  EXPECT_NE(ParseError({"--normalize=0.5,0.5,0.5/0.2,0.2,0.2"})
                .find("--normalize applies to --dataset=image-folder or webdataset only"),
            std::string::npos);
}

TEST(FlagsTest, RejectsUnknownModelAndListsKnownOnes) {
  const std::string error = ParseError({"--model=resnet1000"});
  EXPECT_NE(error.find("--model=resnet1000: unknown model"), std::string::npos) << error;
  EXPECT_NE(error.find("resnet8, resnet18"), std::string::npos) << error;
  // --list-models needs no valid --model.
  EXPECT_EQ(ParseError({"--model=resnet1000", "--list-models"}), "");
}

TEST(FlagsTest, HelpExplainsEveryFlagWithItsDefault) {
  TrainOptions options;
  FlagSet flags("cifar", "Trains.");
  RegisterTrainFlags(flags, options);
  const char* argv[] = {"cifar", "--lr=0.5", "--help"};
  flags.Parse(3, argv);
  EXPECT_TRUE(flags.help_requested());
  const std::string help = flags.Help();
  for (const char* expected :
       {"--model=STRING", "(default: \"resnet18\")", "--lr=FLOAT", "(default: 0.1)", "--epochs=INT",
        "(default: 200)", "--nesterov\n", "(default: false)", "--augment\n", "(default: true)",
        "One of: sgd adam adamw.", "--checkpoint-dir", "--resume", "--max-steps", "--list-models",
        "--help"}) {
    EXPECT_NE(help.find(expected), std::string::npos) << expected << "\n" << help;
  }
}

// The distributed trainer adds its flags to the same set.
TEST(FlagsTest, OtherBinariesExtendTheSet) {
  TrainOptions options;
  int64_t workers = 1;
  FlagSet flags("cifar", "Trains.");
  RegisterTrainFlags(flags, options);
  flags.AddInt("workers", &workers, "Worker processes.");
  const char* argv[] = {"cifar", "--workers=8", "--lr=0.2"};
  flags.Parse(3, argv);
  EXPECT_EQ(workers, 8);
  EXPECT_DOUBLE_EQ(options.lr, 0.2);
  EXPECT_THROW(flags.AddInt("workers", &workers, "again"), std::logic_error);
}

}  // namespace
}  // namespace elastic::trainer
