// How many threads one process computes with.
#pragma once

namespace elastic::trainer {

// Sets LibTorch's intra-op threads and the BLAS library's own to `threads`
// (>= 1). LibTorch's setting reaches OpenMP only: Debian's OpenBLAS (the
// pthreads build behind libblas.so.3, which LibTorch calls for matrix
// products) keeps its own pool of one thread per core, whose threads spin
// while they wait. Two workers of --threads 1 on two cores then ran four busy
// threads: a GPT's step (matrix products throughout) took 2.7x as long
// (docs/benchmarks.md, "Language models against nanoGPT"). The BLAS pool is
// set through openblas_set_num_threads when the process has OpenBLAS loaded;
// with another BLAS nothing else is changed.
void SetComputeThreads(int threads);

// The BLAS pool's size (OpenBLAS's openblas_get_num_threads); 0 when the
// process has no OpenBLAS.
int BlasThreads();

// Ends OpenBLAS's pool threads, which it starts when it is loaded; its next
// matrix product starts them again. OpenBLAS does the same itself before a
// fork (its pthread_atfork handler); a process that wants to be
// single-threaded for a fork it makes later (runtime/preforked_workers.h)
// calls this first. Nothing without OpenBLAS.
void StopBlasThreadsUntilNextUse();

}  // namespace elastic::trainer
