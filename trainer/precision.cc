#include "trainer/precision.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdio>

#include "trainer/flags.h"

namespace elastic::trainer {
namespace {

// XCR0, the register state the OS saves and restores: an instruction set
// whose registers the OS does not manage cannot be used, whatever cpuid says.
uint64_t EnabledRegisterState() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return 0;
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

}  // namespace

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFloat32:
      return "fp32";
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
    case Precision::kFloat64:
      return "fp64";
  }
  return "?";
}

CpuFeatures DetectCpuFeatures() {
  CpuFeatures cpu;
  const uint64_t xcr0 = EnabledRegisterState();
  // SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state: what AVX-512 needs.
  const bool avx512_state = (xcr0 & 0xE6) == 0xE6;
  // TILECFG and TILEDATA: what AMX needs (Linux grants it to a process on
  // request, which oneDNN makes; the OS must support it in XCR0 first).
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return cpu;
  const bool avx512f = (ebx & (1u << 16)) != 0;
  cpu.amx_bf16 = amx_state && (edx & (1u << 22)) != 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
    cpu.avx512_bf16 = avx512_state && avx512f && (eax & (1u << 5)) != 0;
  }
  return cpu;
}

std::string DescribeCpu(const CpuFeatures& cpu) {
  if (cpu.amx_bf16 && cpu.avx512_bf16) return "AMX-BF16 and AVX512-BF16";
  if (cpu.amx_bf16) return "AMX-BF16";
  if (cpu.avx512_bf16) return "AVX512-BF16";
  return "no bf16 instructions";
}

std::vector<std::string> PrecisionValues() { return {"auto", "fp32", "bf16", "fp16", "fp64"}; }

namespace {

bool NativeBf16(const CpuFeatures& cpu) { return cpu.amx_bf16 || cpu.avx512_bf16; }

bool Bf16ConvolutionsWrong(const CpuFeatures& cpu) {
  return cpu.bf16_convolution_error > kMaxBf16ConvolutionError;
}

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f%%", 100 * fraction);
  return text;
}

}  // namespace

bool NeedsBf16Check(const std::string& requested, bool cuda, const CpuFeatures& cpu) {
  if (cuda) return false;
  return requested == "bf16" || (requested == "auto" && NativeBf16(cpu));
}

PrecisionChoice ChoosePrecision(const std::string& requested, bool cuda, const CpuFeatures& cpu) {
  const bool native_bf16 = NativeBf16(cpu);
  if (requested == "auto") {
    if (cuda) return {Precision::kFloat32, "auto on CUDA (fp16 or bf16 with --precision)"};
    if (native_bf16 && Bf16ConvolutionsWrong(cpu)) {
      return {Precision::kFloat32, "auto: this CPU has " + DescribeCpu(cpu) +
                                       ", but LibTorch's bf16 convolutions are " +
                                       Percent(cpu.bf16_convolution_error) + " off fp32 here"};
    }
    if (native_bf16) {
      return {Precision::kBFloat16,
              "auto: this CPU has " + DescribeCpu(cpu) + "; --precision=fp32 turns it off"};
    }
    return {Precision::kFloat32, "auto: this CPU has no AMX-BF16 or AVX512-BF16"};
  }
  if (requested == "fp32") return {Precision::kFloat32, "--precision=fp32"};
  if (requested == "fp64") {
    return {Precision::kFloat64, "--precision=fp64: float64 throughout, for step-for-step checks"};
  }
  if (requested == "bf16") {
    if (cuda) return {Precision::kBFloat16, "--precision=bf16"};
    if (Bf16ConvolutionsWrong(cpu)) {
      throw FlagError("--precision=bf16: LibTorch's bf16 convolutions on this CPU (" +
                      DescribeCpu(cpu) + ") are " + Percent(cpu.bf16_convolution_error) +
                      " off fp32, where a correct one is within about 0.5% (measured at start: "
                      "without oneDNN's bf16 kernels LibTorch sums the gradients in bf16), and "
                      "would train a broken model; use --precision=fp32, which auto picks here");
    }
    if (native_bf16) return {Precision::kBFloat16, "--precision=bf16"};
    return {Precision::kBFloat16,
            "--precision=bf16, emulated: this CPU has no AMX-BF16 or AVX512-BF16, expect it "
            "slower than fp32"};
  }
  if (requested == "fp16") {
    if (!cuda) {
      throw FlagError(
          "--precision: fp16 is for CUDA (with loss scaling); on a CPU use bf16 or fp32");
    }
    return {Precision::kFloat16, "--precision=fp16"};
  }
  throw FlagError("--precision: unknown value '" + requested +
                  "' (auto, fp32, bf16, fp16 or fp64)");
}

std::vector<std::string> MemoryFormatValues() { return {"auto", "contiguous", "channels-last"}; }

bool ChooseChannelsLast(const std::string& requested, bool model_prefers_channels_last,
                        Precision precision) {
  if (requested == "auto") return model_prefers_channels_last && precision != Precision::kFloat64;
  if (requested == "contiguous") return false;
  if (requested == "channels-last") return true;
  throw FlagError("--memory-format: unknown value '" + requested +
                  "' (auto, contiguous or channels-last)");
}

}  // namespace elastic::trainer
