// Dense (no sparsity) peak FLOP/s of known GPUs from NVIDIA's datasheets, for MFU against
// the datasheet. A device matches an entry only by its exact CUDA name and a memory size in
// the entry's range (issue 17, defect 9: "NVIDIA H200 NVL" is not "NVIDIA H200"; its dense
// bf16 peak is 835, not 989 TFLOP/s). No match means no datasheet MFU, never a default.
// Not here: the measured cuBLAS peak (cuda/cuda_backend.hpp), the CPU peak (step_bench).
#pragma once

#include <string>

namespace meshbench::parallel {

struct DatasheetEntry {
  const char* name;              // cudaDeviceProp::name, exactly
  double mem_gib_lo, mem_gib_hi; // totalGlobalMem in GiB must lie in [lo, hi]
  double fp32, bf16;             // FLOP/s: non-tensor FP32 (SGEMM without TF32), dense BF16
  const char* form;              // "SXM 141 GB", for the printed line
};

// nullptr when nothing matches exactly.
const DatasheetEntry* datasheet_entry(const std::string& device_name, double mem_gib);
// "NVIDIA H200 (SXM 141 GB, 130-150 GiB): fp32 67.0, bf16 989.4 TFLOP/s dense", or why none.
std::string describe_datasheet(const std::string& device_name, double mem_gib);

}  // namespace meshbench::parallel
