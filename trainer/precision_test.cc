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
