#include "trainer/precision.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

constexpr CpuFeatures kNoBf16 = {};
constexpr CpuFeatures kAvx512Bf16 = {.avx512_bf16 = true};             // Cooper Lake, Zen 4/5
constexpr CpuFeatures kAmx = {.avx512_bf16 = true, .amx_bf16 = true};  // Sapphire Rapids

TEST(PrecisionTest, AutoPicksBf16OnlyWhereTheCpuRunsItNatively) {
  EXPECT_EQ(ChoosePrecision("auto", false, kAvx512Bf16).precision, Precision::kBFloat16);
  EXPECT_EQ(ChoosePrecision("auto", false, kAmx).precision, Precision::kBFloat16);
  EXPECT_EQ(ChoosePrecision("auto", false, CpuFeatures{.amx_bf16 = true}).precision,
            Precision::kBFloat16);
  EXPECT_EQ(ChoosePrecision("auto", false, kNoBf16).precision, Precision::kFloat32);
  // CUDA: fp32 unless asked (fp16 or bf16 are the user's choice there).
  EXPECT_EQ(ChoosePrecision("auto", true, kAmx).precision, Precision::kFloat32);
}

TEST(PrecisionTest, TheReasonNamesWhatTheCpuHasAndHowToOverride) {
  const PrecisionChoice bf16 = ChoosePrecision("auto", false, kAmx);
  EXPECT_NE(bf16.why.find("AMX-BF16 and AVX512-BF16"), std::string::npos) << bf16.why;
  EXPECT_NE(bf16.why.find("--precision=fp32"), std::string::npos) << bf16.why;
  const PrecisionChoice fp32 = ChoosePrecision("auto", false, kNoBf16);
  EXPECT_NE(fp32.why.find("no AMX-BF16 or AVX512-BF16"), std::string::npos) << fp32.why;
}

TEST(PrecisionTest, ForcedEitherWayAndEmulatedBf16IsSaidToBeSlow) {
  EXPECT_EQ(ChoosePrecision("fp32", false, kAmx).precision, Precision::kFloat32);
  EXPECT_EQ(ChoosePrecision("bf16", false, kAvx512Bf16).precision, Precision::kBFloat16);
  const PrecisionChoice emulated = ChoosePrecision("bf16", false, kNoBf16);
  EXPECT_EQ(emulated.precision, Precision::kBFloat16);
  EXPECT_NE(emulated.why.find("emulated"), std::string::npos) << emulated.why;
  EXPECT_EQ(ChoosePrecision("fp16", true, kNoBf16).precision, Precision::kFloat16);
  EXPECT_EQ(ChoosePrecision("bf16", true, kNoBf16).precision, Precision::kBFloat16);
}

// LibTorch 1.13 on an AVX2-only CPU sums bf16 convolution gradients in bf16
// (measured 19% off fp32 in MeasureBf16ConvolutionError): bf16 is refused
// with the figure and the way out, and auto never picks it.
TEST(PrecisionTest, Bf16WhoseConvolutionsAreWrongIsRefusedOrNotPicked) {
  CpuFeatures wrong = kNoBf16;
  wrong.bf16_convolution_error = 0.189;
  try {
    ChoosePrecision("bf16", false, wrong);
    FAIL() << "bf16 that trains a broken model must be refused";
  } catch (const FlagError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--precision=bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("18.9% off fp32"), std::string::npos) << message;
    EXPECT_NE(message.find("use --precision=fp32"), std::string::npos) << message;
  }
  EXPECT_EQ(ChoosePrecision("auto", false, wrong).precision, Precision::kFloat32);
  // Native instructions but wrong convolutions (a LibTorch without oneDNN's
  // bf16 kernels): auto says so and takes fp32.
  CpuFeatures native_but_wrong = kAvx512Bf16;
  native_but_wrong.bf16_convolution_error = 0.05;
  const PrecisionChoice fallback = ChoosePrecision("auto", false, native_but_wrong);
  EXPECT_EQ(fallback.precision, Precision::kFloat32);
  EXPECT_NE(fallback.why.find("5.0% off fp32"), std::string::npos) << fallback.why;
  EXPECT_THROW(ChoosePrecision("bf16", false, native_but_wrong), FlagError);
  // Right at the bound, and on CUDA (whose kernels the CPU check says nothing of).
  CpuFeatures at_bound = kNoBf16;
  at_bound.bf16_convolution_error = kMaxBf16ConvolutionError;
  EXPECT_EQ(ChoosePrecision("bf16", false, at_bound).precision, Precision::kBFloat16);
  EXPECT_EQ(ChoosePrecision("bf16", true, wrong).precision, Precision::kBFloat16);
}

TEST(PrecisionTest, TheConvolutionsAreMeasuredOnlyWhereBf16IsInQuestion) {
  EXPECT_TRUE(NeedsBf16Check("bf16", false, kNoBf16));
  EXPECT_TRUE(NeedsBf16Check("auto", false, kAvx512Bf16));
  EXPECT_FALSE(NeedsBf16Check("auto", false, kNoBf16));
  EXPECT_FALSE(NeedsBf16Check("fp32", false, kAmx));
  EXPECT_FALSE(NeedsBf16Check("bf16", true, kNoBf16));
}

TEST(PrecisionTest, ImpossibleValuesAreFlagErrorsNamingTheFlag) {
  try {
    ChoosePrecision("fp16", false, kAmx);
    FAIL() << "fp16 on a CPU must be refused";
  } catch (const FlagError& e) {
    EXPECT_NE(std::string(e.what()).find("--precision"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChoosePrecision("int8", false, kAmx), FlagError);
  EXPECT_THROW(ChooseChannelsLast("nhwc", true), FlagError);
}

TEST(PrecisionTest, MemoryFormatAutoFollowsTheModelAndCanBeForced) {
  EXPECT_TRUE(ChooseChannelsLast("auto", true));
  EXPECT_FALSE(ChooseChannelsLast("auto", false));
  EXPECT_TRUE(ChooseChannelsLast("channels-last", false));
  EXPECT_FALSE(ChooseChannelsLast("contiguous", true));
}

TEST(PrecisionTest, Fp64IsAChoiceOnEveryDeviceAndMakesAutoContiguous) {
  EXPECT_EQ(ChoosePrecision("fp64", false, kNoBf16).precision, Precision::kFloat64);
  EXPECT_EQ(ChoosePrecision("fp64", true, kAmx).precision, Precision::kFloat64);
  EXPECT_FALSE(NeedsBf16Check("fp64", false, kAmx));
  EXPECT_FALSE(ChooseChannelsLast("auto", true, Precision::kFloat64));
  EXPECT_TRUE(ChooseChannelsLast("channels-last", true, Precision::kFloat64));
}

// cpuid as the kernel reports it: the flags line of /proc/cpuinfo (which
// also reflects what the OS enabled).
TEST(PrecisionTest, DetectionAgreesWithProcCpuinfo) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!cpuinfo) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line, flags;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  }
  ASSERT_FALSE(flags.empty());
  const CpuFeatures cpu = DetectCpuFeatures();
  EXPECT_EQ(cpu.avx512_bf16, flags.find(" avx512_bf16 ") != std::string::npos) << flags;
  EXPECT_EQ(cpu.amx_bf16, flags.find(" amx_bf16 ") != std::string::npos) << flags;
}

}  // namespace
}  // namespace elastic::trainer
