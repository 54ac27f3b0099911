// The datasheet table (datasheet.hpp). Sources: NVIDIA H200, H100, A100, L40S and A10
// datasheets (dense figures are half the "with sparsity" tensor-core numbers).
#include "kernels/datasheet.hpp"

#include <cmath>

#include <fmt/core.h>

namespace meshbench::parallel {
namespace {
const DatasheetEntry kTable[] = {
    {"NVIDIA H200", 130, 150, 67e12, 989.4e12, "SXM 141 GB"},
    {"NVIDIA H200 NVL", 130, 150, 60e12, 835.5e12, "NVL PCIe 141 GB"},
    {"NVIDIA H100 80GB HBM3", 75, 85, 67e12, 989.4e12, "SXM 80 GB"},
    {"NVIDIA H100 PCIe", 75, 85, 51e12, 756e12, "PCIe 80 GB"},
    {"NVIDIA H100 NVL", 88, 100, 60e12, 835.5e12, "NVL 94 GB"},
    {"NVIDIA A100-SXM4-80GB", 75, 85, 19.5e12, 312e12, "SXM 80 GB"},
    {"NVIDIA A100-SXM4-40GB", 36, 42, 19.5e12, 312e12, "SXM 40 GB"},
    {"NVIDIA A100 80GB PCIe", 75, 85, 19.5e12, 312e12, "PCIe 80 GB"},
    {"NVIDIA A100-PCIE-40GB", 36, 42, 19.5e12, 312e12, "PCIe 40 GB"},
    {"NVIDIA L40S", 40, 50, 91.6e12, 362.05e12, "PCIe 48 GB"},
    {"NVIDIA A10", 20, 25, 31.2e12, 125e12, "PCIe 24 GB"},
};
}  // namespace

const DatasheetEntry* datasheet_entry(const std::string& device_name, double mem_gib) {
  for (const auto& e : kTable)
    if (device_name == e.name && mem_gib >= e.mem_gib_lo && mem_gib <= e.mem_gib_hi) return &e;
  return nullptr;
}

std::string describe_datasheet(const std::string& device_name, double mem_gib) {
  const DatasheetEntry* e = datasheet_entry(device_name, mem_gib);
  if (e == nullptr)
    return fmt::format("no datasheet entry for \"{}\" with {:.1f} GiB (exact name and memory "
                       "required): no datasheet MFU", device_name, mem_gib);
  return fmt::format("{} ({}, {:.0f}-{:.0f} GiB; device has {:.1f} GiB): fp32 {:.1f}, bf16 "
                     "{:.1f} TFLOP/s dense", e->name, e->form, e->mem_gib_lo, e->mem_gib_hi,
                     mem_gib, e->fp32 / 1e12, e->bf16 / 1e12);
}

}  // namespace meshbench::parallel
