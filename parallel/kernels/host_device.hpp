// MB_HD: a function both the host and a CUDA kernel call (__host__ __device__ under nvcc,
// nothing elsewhere), for the kernel steps the emulation backend runs on the CPU as well.
#pragma once

#ifdef __CUDACC__
#define MB_HD __host__ __device__
#else
#define MB_HD
#endif
