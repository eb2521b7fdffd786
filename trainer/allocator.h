// Process-wide malloc settings for training processes.
#pragma once

namespace elastic::trainer {

// Makes glibc keep freed blocks of up to 32 MiB for reuse instead of handing
// them back to the kernel. With the defaults, the activations and gradients
// that every training step allocates and frees (hundreds of KiB to a few MiB
// each) are unmapped or trimmed after the step and faulted in, page by page,
// during the next: ResNet-8 at batch 64 took 8x more page faults and 12% more
// CPU time. Call once, early in main. Does nothing when GLIBC_TUNABLES sets
// malloc options, so an operator's own settings win.
void KeepFreedMemoryForReuse();

}  // namespace elastic::trainer
