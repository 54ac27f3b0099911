// The device-step fixture of nccl_order_test.cpp (issue 44, items 6 and 10): host_syncs, a
// device backend over the CPU backend's ops whose streams, waits and copies go through the faked
// CUDA calls (FakeDeviceBackend), and the tiny model the steps run. Included once, by
// nccl_order_test.cpp, inside its anonymous namespace after fakes.hpp (it uses g and Call).
#pragma once

namespace mp = meshbench::parallel;

// The host synchronisations a run of calls made: stream, event and device synchronisations.
int host_syncs(const std::vector<Call>& calls) {
  int n = 0;
  for (const Call& c : calls) n += c.fn == "streamSynchronize" || c.fn == "eventSynchronize" || c.fn == "deviceSynchronize";
  return n;
}

// The CPU backend's ops on host memory behind a device backend's face: its own fake stream,
// and its waits and copies made through the faked CUDA calls (as cuda/backend_cuda.cu makes
// them), so the fake records every host synchronisation a step asks of a device backend.
class FakeDeviceBackend final : public mp::ForwardingBackend<float> {
 public:
  FakeDeviceBackend() : mp::ForwardingBackend<float>(mp::cpu_backend<float>()), stream_(g.handle()) {}
  mp::Backend<float>& cpu = inner_;
  std::string name() const override { return "fake device"; }
  meshbench::compute::MemKind mem() const override { return MemKind::kDevice; }
  void* stream() const override { return stream_; }
  void synchronize() override { cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)); }
  void upload(void* dst, const void* host, std::size_t bytes) override {  // complete on return
    upload_async(dst, host, bytes);
    synchronize();
  }
  void upload_async(void* dst, const void* host, std::size_t bytes) override {
    cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_));
    std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, std::size_t bytes) override {
    cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_));
    std::memcpy(host, src, bytes);
    synchronize();
  }
  bool defer_losses(bool on) override {
    defer_ = on;
    return true;
  }
  double take_losses() override {
    double sum = 0;
    download(&sum, &loss_acc_, sizeof sum);
    loss_acc_ = 0;
    return sum;
  }
  // The loss is read on the host (a download) unless deferred.
  float deferred(float loss) {
    if (defer_) {
      loss_acc_ += static_cast<double>(loss);
      return 0.f;
    }
    float host = 0;
    download(&host, &loss, sizeof host);
    return host;
  }
  float crossentropy_forward(float* p, float* l, const float* lg, const int32_t* t, int N, int V) override {
    return deferred(cpu.crossentropy_forward(p, l, lg, t, N, V));
  }
  float crossentropy_finish(float* p, float* l, const float* se, const float* tl, const float* m, int N, int V) override {
    return deferred(cpu.crossentropy_finish(p, l, se, tl, m, N, V));
  }

 private:
  void* stream_;
  bool defer_ = false;
  double loss_acc_ = 0;
};

mp::GptConfig tiny_config() {
  mp::GptConfig c;
  c.layers = 2;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 2;
  c.ffn = 16;
  c.seq = 4;
  c.max_seq = 4;
  c.vocab = 11;
  c.micro_batch = 1;
  return c;
}
