// Device API over the CUDA runtime. A CUDA call that fails after a device was found is a
// runtime fault (exit 3) naming the call (MB_CHECK_CUDA, core/error.hpp). probe_gpus()
// tells "no GPU here" (no NVIDIA driver, or the driver sees no device: skip) from "a GPU
// CUDA cannot use" (a driver too old for this runtime, a broken install: fail, saying which).
// Host<->device copies are queued on a stream and complete before they return, so a
// communicator or compute stream that runs after them reads the data (issue 17, defect 2).
// Not here: kernels, cuBLAS (parallel/kernels/cuda/), NCCL (comm/nccl_comm.cu).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include <fmt/core.h>

#include "compute/device.hpp"
#include "core/error.hpp"

namespace meshbench::compute {
namespace {
std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
}  // namespace

bool built_with_cuda() { return true; }

GpuProbe probe_gpus() {
  GpuProbe p;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) {
    p.state = GpuState::kUsable;
    p.count = n;
    p.detail = fmt::format("{} CUDA device(s)", n);
    return p;
  }
  (void)cudaGetLastError();  // clear the error the failed call left behind
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no NVIDIA driver is installed
  (void)cudaRuntimeGetVersion(&runtime);
  const std::string err = e == cudaSuccess
                              ? std::string("no CUDA device")
                              : fmt::format("CUDA error {} ({}): {}", int(e), cudaGetErrorName(e),
                                            cudaGetErrorString(e));
  if (e == cudaSuccess || e == cudaErrorNoDevice || driver == 0) {
    p.state = GpuState::kAbsent;
    p.detail = driver == 0 ? fmt::format("no NVIDIA driver on this machine ({})", err) : err;
  } else {
    p.state = GpuState::kUnusable;
    p.detail = fmt::format("a GPU driver is present but CUDA cannot use it: {}; the driver "
                           "supports CUDA {}, this build's runtime is CUDA {}",
                           err, version_text(driver), version_text(runtime));
  }
  return p;
}

int device_count() {
  const GpuProbe p = probe_gpus();
  return p.state == GpuState::kUsable ? p.count : 0;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown";
  return prop.name;
}

std::string cuda_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "none";
  return version_text(v);
}

void set_device(int index) { MB_CHECK_CUDA(cudaSetDevice(index), "-"); }

std::size_t device_memory_free() {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return free;
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  MB_CHECK_CUDA(cudaMalloc(&p, bytes), "-");
  MB_CHECK_CUDA(cudaMemset(p, 0, bytes), "-");
  MB_CHECK_CUDA(cudaDeviceSynchronize(), "-");  // the memset is done before any stream uses p
  return p;
}

void device_free(void* p) noexcept { (void)cudaFree(p); }

// A pageable cudaMemcpy may return before the data lands on the device, and the legacy
// stream does not order against non-blocking streams (NCCL's): queue the copy, then wait.
void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "-");
  MB_CHECK_CUDA(cudaStreamSynchronize(s), "-");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  MB_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "-");
  MB_CHECK_CUDA(cudaStreamSynchronize(s), "-");
}

void stream_synchronize(void* stream) {
  MB_CHECK_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "-");
}

struct DeviceClock::Impl {
  cudaEvent_t anchor = nullptr;
  double t_anchor = 0;
  std::vector<cudaEvent_t> events;  // a pool: the first `used` are this round's marks
  std::vector<double> t;
  int used = 0;
  ~Impl() {
    if (anchor) (void)cudaEventDestroy(anchor);
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  }
};

DeviceClock::DeviceClock() : impl_(std::make_unique<Impl>()) {}
DeviceClock::~DeviceClock() = default;

void DeviceClock::start(void* stream, double t_host) {
  if (!impl_->anchor) MB_CHECK_CUDA(cudaEventCreate(&impl_->anchor), "-");
  MB_CHECK_CUDA(cudaEventRecord(impl_->anchor, static_cast<cudaStream_t>(stream)), "-");
  impl_->t_anchor = t_host;
  impl_->used = 0;
  impl_->t.clear();
}

int DeviceClock::mark(void* stream) {
  Impl& m = *impl_;
  if (!m.anchor) return -1;  // not started
  if (m.used == static_cast<int>(m.events.size())) {
    cudaEvent_t e = nullptr;
    MB_CHECK_CUDA(cudaEventCreate(&e), "-");
    m.events.push_back(e);
  }
  MB_CHECK_CUDA(cudaEventRecord(m.events[static_cast<size_t>(m.used)], static_cast<cudaStream_t>(stream)), "-");
  return m.used++;
}

// cudaEventElapsedTime answers cudaErrorNotReady for an event that has not run: only then wait.
void DeviceClock::resolve() {
  Impl& m = *impl_;
  m.t.assign(static_cast<size_t>(m.used), 0.0);
  for (int i = 0; i < m.used; ++i) {
    cudaEvent_t e = m.events[static_cast<size_t>(i)];
    float ms = 0;
    cudaError_t r = cudaEventElapsedTime(&ms, m.anchor, e);
    if (r == cudaErrorNotReady) {
      MB_CHECK_CUDA(cudaEventSynchronize(e), "-");
      r = cudaEventElapsedTime(&ms, m.anchor, e);
    }
    MB_CHECK_CUDA(r, "-");
    m.t[static_cast<size_t>(i)] = m.t_anchor + static_cast<double>(ms) * 1e-3;
  }
}

double DeviceClock::at(int mark) const { return impl_->t.at(static_cast<size_t>(mark)); }
int DeviceClock::marks() const { return impl_->used; }

}  // namespace meshbench::compute
