// Device API when meshbench is built without CUDA: no devices, clear refusals.
#include "compute/device.hpp"
#include "core/error.hpp"

namespace meshbench::compute {
namespace {
[[noreturn]] void no_cuda() {
  throw core::UsageError("--mem device: this meshbench was built without CUDA (nvcc was not found at configure time)");
}
}  // namespace

GpuProbe probe_gpus() { return {GpuState::kAbsent, 0, "meshbench was built without CUDA"}; }
bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return "none"; }
std::string cuda_version() { return "none"; }
void set_device(int) { no_cuda(); }
std::size_t device_memory_free() { return 0; }
void* device_alloc(std::size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t, void*) { no_cuda(); }
void copy_to_host(void*, const void*, std::size_t, void*) { no_cuda(); }
void stream_synchronize(void*) {}

struct DeviceClock::Impl {};
DeviceClock::DeviceClock() = default;
DeviceClock::~DeviceClock() = default;
void DeviceClock::start(void*, double) {}
int DeviceClock::mark(void*) { return -1; }
void DeviceClock::resolve() {}
double DeviceClock::at(int) const { return 0.0; }
int DeviceClock::marks() const { return 0; }

}  // namespace meshbench::compute
