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
class FakeDeviceBackend final : public mp::Backend<float> {
 public:
  FakeDeviceBackend() : stream_(g.handle()) {}
  mp::Backend<float>& cpu = mp::cpu_backend<float>();
  std::string name() const override { return "fake device"; }
  meshbench::compute::MemKind mem() const override { return MemKind::kDevice; }
  void* stream() const override { return stream_; }
  void synchronize() override { cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)); }
  void* alloc(std::size_t bytes) override { return cpu.alloc(bytes); }
  void release(void* p) noexcept override { cpu.release(p); }
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
  void zero(void* p, std::size_t bytes) override { cpu.zero(p, bytes); }
  void copy(float* d, const float* s, int64_t n) override { cpu.copy(d, s, n); }
  void scale(float* x, double a, int64_t n) override { cpu.scale(x, a, n); }
  void add(float* d, const float* s, int64_t n) override { cpu.add(d, s, n); }
  void embedding_forward(float* o, const int32_t* t, const float* wte, const float* wpe, int B, int T, int C) override {
    cpu.embedding_forward(o, t, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* d, const int32_t* t, int B, int T, int C) override {
    cpu.embedding_backward(dwte, dwpe, d, t, B, T, C);
  }
  void layernorm_forward(float* o, float* m, float* r, const float* i, const float* w, const float* b, int N,
                         int C) override {
    cpu.layernorm_forward(o, m, r, i, w, b, N, C);
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int N, int C) override {
    cpu.layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void matmul_forward(float* o, const float* i, const float* w, const float* b, int N, int C, int OC, bool acc) override {
    cpu.matmul_forward(o, i, w, b, N, C, OC, acc);
  }
  void matmul_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w, int N, int C,
                       int OC) override {
    cpu.matmul_backward(di, dw, db, d, i, w, N, C, OC);
  }
  void attention_forward(float* o, float* a, const float* q, int B, int T, int NH, int KVH, int hs) override {
    cpu.attention_forward(o, a, q, B, T, NH, KVH, hs);
  }
  void attention_backward(float* dq, float* da, const float* d, const float* q, const float* a, int B, int T, int NH,
                          int KVH, int hs) override {
    cpu.attention_backward(dq, da, d, q, a, B, T, NH, KVH, hs);
  }
  void gelu_forward(float* o, const float* i, int64_t N) override { cpu.gelu_forward(o, i, N); }
  void gelu_backward(float* di, const float* i, const float* d, int64_t N) override { cpu.gelu_backward(di, i, d, N); }
  float crossentropy_forward(float* p, float* l, const float* lg, const int32_t* t, int N, int V) override {
    return deferred(cpu.crossentropy_forward(p, l, lg, t, N, V));
  }
  void crossentropy_backward(float* dl, const float* p, const int32_t* t, float d, int N, int V) override {
    cpu.crossentropy_backward(dl, p, t, d, N, V);
  }
  void crossentropy_rowmax(float* m, const float* lg, int N, int V, int valid) override {
    cpu.crossentropy_rowmax(m, lg, N, V, valid);
  }
  void crossentropy_partial(float* p, float* se, float* tl, const float* lg, const float* m, const int32_t* t, int N,
                            int V, int valid) override {
    cpu.crossentropy_partial(p, se, tl, lg, m, t, N, V, valid);
  }
  float crossentropy_finish(float* p, float* l, const float* se, const float* tl, const float* m, int N, int V) override {
    return deferred(cpu.crossentropy_finish(p, l, se, tl, m, N, V));
  }
  void bias_residual_add(float* o, const float* x, const float* b, int N, int C) override {
    cpu.bias_residual_add(o, x, b, N, C);
  }
  void attention_chunk_forward(float* o, int ldo, float* lse, const float* q, int ldq, const float* k, int ldk,
                               const float* v, int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0, int k0,
                               bool first) override {
    cpu.attention_chunk_forward(o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Tq, Tk, NH, KVH, hs, q0, k0, first);
  }
  void attention_chunk_backward(float* dq, int lddq, float* dk, int lddk, float* dv, int lddv, const float* dout,
                                int lddo, const float* D, const float* lse, const float* q, int ldq, const float* k,
                                int ldk, const float* v, int ldv, int B, int Tq, int Tk, int NH, int KVH, int hs, int q0,
                                int k0) override {
    cpu.attention_chunk_backward(dq, lddq, dk, lddk, dv, lddv, dout, lddo, D, lse, q, ldq, k, ldk, v, ldv, B, Tq, Tk,
                                 NH, KVH, hs, q0, k0);
  }
  void attention_rowdot(float* D, const float* d, int lddo, const float* o, int ldo, int B, int T, int NH,
                        int hs) override {
    cpu.attention_rowdot(D, d, lddo, o, ldo, B, T, NH, hs);
  }
  void copy_2d(float* d, int64_t ldd, const float* s, int64_t lds, int64_t r, int64_t c) override {
    cpu.copy_2d(d, ldd, s, lds, r, c);
  }
  void add_2d(float* d, int64_t ldd, const float* s, int64_t lds, int64_t r, int64_t c) override {
    cpu.add_2d(d, ldd, s, lds, r, c);
  }
  void adamw_update(float* p, const float* gr, float* m, float* v, int64_t n, const mp::AdamWConfig& cfg, double wd,
                    int t) override {
    cpu.adamw_update(p, gr, m, v, n, cfg, wd, t);
  }
  int64_t take_nonfinite_grads() override { return cpu.take_nonfinite_grads(); }
  void moe_topk_forward(int32_t* idx, float* gt, float* pr, const float* lg, int N, int E, int k, bool as) override {
    cpu.moe_topk_forward(idx, gt, pr, lg, N, E, k, as);
  }
  void moe_topk_backward(float* dl, const float* dg, const float* dp, const float* pr, const float* gt,
                         const int32_t* idx, int N, int E, int k) override {
    cpu.moe_topk_backward(dl, dg, dp, pr, gt, idx, N, E, k);
  }
  void moe_plan(int32_t* slot, int32_t* cnt, float* ps, const int32_t* idx, const float* pr, int N, int E, int k,
                int cap) override {
    cpu.moe_plan(slot, cnt, ps, idx, pr, N, E, k, cap);
  }
  void moe_permute_forward(float* xp, const float* x, const int32_t* slot, int N, int C, int k) override {
    cpu.moe_permute_forward(xp, x, slot, N, C, k);
  }
  void moe_permute_backward(float* dx, const float* dxp, const int32_t* slot, int N, int C, int k) override {
    cpu.moe_permute_backward(dx, dxp, slot, N, C, k);
  }
  void moe_unpermute_forward(float* o, const float* yp, const float* gt, const int32_t* slot, int N, int C,
                             int k) override {
    cpu.moe_unpermute_forward(o, yp, gt, slot, N, C, k);
  }
  void moe_unpermute_backward(float* dyp, float* dg, const float* d, const float* yp, const float* gt,
                              const int32_t* slot, int N, int C, int k) override {
    cpu.moe_unpermute_backward(dyp, dg, d, yp, gt, slot, N, C, k);
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
