// The step engine's CUDA path: cuBLAS GEMMs (fp32, or bf16 inputs with fp32 accumulation via
// cublasGemmEx) and plain one-block-per-row or one-thread-per-element kernels for the other
// layers, mirroring layers.cpp and model.cpp so the CPU float32 path is its reference. Master
// weights, gradients and Adam moments stay fp32 in both precisions.
// Not here: fused or flash attention; attention runs as per-(b, h) cuBLAS products.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/error.hpp"
#include "cuda/cuda_engine.hpp"
#include "layers.hpp"
#include "model.hpp"

namespace meshbench::parallel::cuda {

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw core::RuntimeFault(fmt::format("CUDA {} failed: {} ({})", what, cudaGetErrorString(e), int(e)));
}
void ckb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw core::RuntimeFault(fmt::format("cuBLAS {} failed: status {}", what, int(s)));
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t count) : n(count) {
    ck(cudaMalloc(&p, sizeof(T) * (count ? count : 1)), "cudaMalloc");
    ck(cudaMemset(p, 0, sizeof(T) * (count ? count : 1)), "cudaMemset");
  }
  Dev(const T* host, size_t count) : Dev(count) { upload(host); }
  ~Dev() { if (p) cudaFree(p); }
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; o.n = 0; }
  Dev& operator=(Dev&& o) noexcept { std::swap(p, o.p); std::swap(n, o.n); return *this; }
  void upload(const T* host) { ck(cudaMemcpy(p, host, sizeof(T) * n, cudaMemcpyHostToDevice), "H2D"); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    ck(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), "D2H");
    return h;
  }
};

struct Blas {
  cublasHandle_t h{};
  Dev<__nv_bfloat16> a16, b16;  // bf16 staging of GEMM inputs
  Blas() {
    ckb(cublasCreate(&h), "cublasCreate");
    ckb(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // no TF32 in fp32
  }
  ~Blas() { cublasDestroy(h); }
};
Blas& blas() {
  static Blas b;
  return b;
}

__global__ void to_bf16(__nv_bfloat16* out, const float* in, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

unsigned blocks(size_t n, unsigned t = 256) { return static_cast<unsigned>((n + t - 1) / t); }

// Row-major C (M,N) = alpha op(A) op(B) + beta C, as compute::gemm. cuBLAS is column-major,
// so it computes C^T = op(B)^T op(A)^T with the operands swapped.
void gemm(Precision prec, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  Blas& b = blas();
  const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (prec == Precision::kFp32) {
    ckb(cublasSgemm(b.h, opB, opA, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc), "cublasSgemm");
    return;
  }
  const size_t na = size_t(ta ? K : M) * lda, nb = size_t(tb ? N : K) * ldb;
  if (b.a16.n < na) b.a16 = Dev<__nv_bfloat16>(na);
  if (b.b16.n < nb) b.b16 = Dev<__nv_bfloat16>(nb);
  to_bf16<<<blocks(na), 256>>>(b.a16.p, A, na);
  to_bf16<<<blocks(nb), 256>>>(b.b16.p, B, nb);
  ckb(cublasGemmEx(b.h, opB, opA, N, M, K, &alpha, b.b16.p, CUDA_R_16BF, ldb, b.a16.p, CUDA_R_16BF, lda, &beta, C,
                   CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx bf16");
}

// ---- kernels (float32) ---------------------------------------------------------------------

__device__ float block_sum(float v) {
  __shared__ float s[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) s[w] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? s[threadIdx.x] : 0.f;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffff, r, o);
  __shared__ float out;
  if (threadIdx.x == 0) out = r;
  __syncthreads();
  return out;
}

__device__ float block_max(float v) {
  __shared__ float s[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  __syncthreads();
  if (lane == 0) s[w] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? s[threadIdx.x] : -INFINITY;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffff, r, o));
  __shared__ float out;
  if (threadIdx.x == 0) out = r;
  __syncthreads();
  return out;
}

__global__ void k_embedding_fwd(float* out, const int32_t* tok, const float* wte, const float* wpe, int N, int T, int C) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const int n = int(i / C), c = int(i % C);
  out[i] = wte[size_t(tok[n]) * C + c] + wpe[size_t(n % T) * C + c];
}
__global__ void k_embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tok, int N, int T, int C) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const int n = int(i / C), c = int(i % C);
  atomicAdd(&dwte[size_t(tok[n]) * C + c], dout[i]);
  atomicAdd(&dwpe[size_t(n % T) * C + c], dout[i]);
}
__global__ void k_layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int C) {
  const size_t n = blockIdx.x;
  const float* x = inp + n * C;
  float s = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s) / C;
  float v = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(block_sum(v) / C + 1e-5f);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[n * C + c] = (x[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) { mean[n] = m; rstd[n] = r; }
}
__global__ void k_layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                const float* mean, const float* rstd, int C) {
  const size_t n = blockIdx.x;
  const float* x = inp + n * C;
  const float* d = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, bsum = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (x[c] - m) * r, dn = w[c] * d[c];
    a += dn;
    bsum += dn * norm;
  }
  const float dnorm_mean = block_sum(a) / C, dnorm_norm_mean = block_sum(bsum) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (x[c] - m) * r, dn = w[c] * d[c];
    atomicAdd(&db[c], d[c]);
    atomicAdd(&dw[c], norm * d[c]);
    dinp[n * C + c] += (dn - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}
__global__ void k_bias_rows(float* out, const float* bias, int N, int OC, bool accumulate) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * OC) return;
  const float b = bias[i % OC];
  out[i] = accumulate ? out[i] + b : b;
}
__global__ void k_bias_grad(float* dbias, const float* dout, int N, int OC) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= OC) return;
  float s = 0;
  for (int n = 0; n < N; ++n) s += dout[size_t(n) * OC + j];
  dbias[j] += s;
}
__device__ float gelu_tanh(float x, float* dlocal) {
  const float k = 0.7978845608028654f, cube = 0.044715f * x * x * x, th = tanhf(k * (x + cube));
  if (dlocal) *dlocal = 0.5f * (1 + th) + x * 0.5f * (1 - th * th) * k * (1 + 3 * 0.044715f * x * x);
  return 0.5f * x * (1 + th);
}
__global__ void k_gelu_fwd(float* out, const float* inp, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = gelu_tanh(inp[i], nullptr);
}
__global__ void k_gelu_bwd(float* dinp, const float* inp, const float* dout, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float d;
  gelu_tanh(inp[i], &d);
  dinp[i] = d * dout[i];
}
// att rows (B*NH*T of length T), row r is query position r % T: causal softmax in place.
__global__ void k_causal_softmax(float* att, int T) {
  const size_t row = blockIdx.x;
  const int t = int(row % T);
  float* p = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, p[j]);
  mx = block_max(mx);
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += expf(p[j] - mx);
  const float inv = 1.f / block_sum(s);
  for (int j = threadIdx.x; j < T; j += blockDim.x) p[j] = j <= t ? expf(p[j] - mx) * inv : 0.f;
}
__global__ void k_softmax_bwd(float* ds, const float* p, int T) {
  const size_t row = blockIdx.x;
  const int t = int(row % T);
  const float* pr = p + row * T;
  float* d = ds + row * T;
  float s = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += pr[j] * d[j];
  const float dot = block_sum(s);
  for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= t ? pr[j] * (d[j] - dot) : 0.f;
}
__global__ void k_ce_fwd(float* probs, float* losses, const float* logits, const int32_t* tgt, int V) {
  const size_t n = blockIdx.x;
  const float* x = logits + n * V;
  float* p = probs + n * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - mx);
  const float sum = block_sum(s), xt = x[tgt[n]];
  __syncthreads();  // x may alias p
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - mx) / sum;
  if (threadIdx.x == 0) losses[n] = logf(sum) - (xt - mx);
}
__global__ void k_ce_bwd(float* dlogits, const float* probs, const int32_t* tgt, float scale, int N, int V) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(N) * V) return;
  const int n = int(i / V), j = int(i % V);
  dlogits[i] = probs[i] * scale - (j == tgt[n] ? scale : 0.f);
}
__global__ void k_adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2, float omb1,
                        float omb2, float eps, float decay, float bc1, float bc2_sqrt) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i], mi = b1 * m[i] + omb1 * gi, vi = b2 * v[i] + omb2 * gi * gi;
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * decay - (lr / bc1) * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

int row_threads(int n) { return n >= 1024 ? 1024 : (n >= 256 ? 256 : 128); }

// ---- layer wrappers with the CPU argument order ---------------------------------------------

void matmul_fwd(Precision pr, float* out, const float* inp, const float* w, const float* b, int N, int C, int OC,
                bool accumulate) {
  k_bias_rows<<<blocks(size_t(N) * OC), 256>>>(out, b, N, OC, accumulate);
  gemm(pr, false, true, N, OC, C, 1.f, inp, C, w, C, 1.f, out, OC);
}
void matmul_bwd(Precision pr, float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                int N, int C, int OC) {
  gemm(pr, false, false, N, C, OC, 1.f, dout, OC, w, C, 0.f, dinp, C);
  gemm(pr, true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dw, C);
  k_bias_grad<<<blocks(OC), 256>>>(db, dout, N, OC);
}
void attention_fwd(Precision pr, float* out, float* att, const float* qkv, int B, int T, int NH, int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs, g = NH / KVH;
  const float scale = 1.f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* base = qkv + size_t(b) * T * QKV;
      float* p = att + (size_t(b) * NH + h) * T * T;
      gemm(pr, false, true, T, T, hs, scale, base + h * hs, QKV, base + (NH + h / g) * hs, QKV, 0.f, p, T);
    }
  k_causal_softmax<<<B * NH * T, row_threads(T)>>>(att, T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* base = qkv + size_t(b) * T * QKV;
      gemm(pr, false, false, T, hs, T, 1.f, att + (size_t(b) * NH + h) * T * T, T, base + (NH + KVH + h / g) * hs, QKV,
           0.f, out + size_t(b) * T * C + h * hs, C);
    }
}
void attention_bwd(Precision pr, float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
                   int T, int NH, int KVH, int hs) {
  const int C = NH * hs, QKV = (NH + 2 * KVH) * hs, g = NH / KVH;
  const float scale = 1.f / std::sqrt(float(hs));
  ck(cudaMemset(dqkv, 0, sizeof(float) * size_t(B) * T * QKV), "cudaMemset");
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* base = qkv + size_t(b) * T * QKV;
      gemm(pr, false, true, T, T, hs, 1.f, dout + size_t(b) * T * C + h * hs, C, base + (NH + KVH + h / g) * hs, QKV,
           0.f, datt + (size_t(b) * NH + h) * T * T, T);
    }
  k_softmax_bwd<<<B * NH * T, row_threads(T)>>>(datt, att, T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* base = qkv + size_t(b) * T * QKV;
      float* dbase = dqkv + size_t(b) * T * QKV;
      const float* ds = datt + (size_t(b) * NH + h) * T * T;
      const float* p = att + (size_t(b) * NH + h) * T * T;
      const float* dy = dout + size_t(b) * T * C + h * hs;
      const int kv = h / g;
      gemm(pr, false, false, T, hs, T, scale, ds, T, base + (NH + kv) * hs, QKV, 0.f, dbase + h * hs, QKV);
      gemm(pr, true, false, T, hs, T, scale, ds, T, base + h * hs, QKV, 1.f, dbase + (NH + kv) * hs, QKV);
      gemm(pr, true, false, T, hs, T, 1.f, p, T, dy, C, 1.f, dbase + (NH + KVH + kv) * hs, QKV);
    }
}

// ---- the GPU model, wired as model.cpp --------------------------------------------------------

class GpuGpt {
 public:
  GpuGpt(const Gpt<float>& host, Precision pr) : c_(host.config()), pr_(pr), layout_(host.layout()) {
    const size_t P = size_t(layout_.total());
    params_ = Dev<float>(host.params(), P);
    grads_ = Dev<float>(P);
    m_ = Dev<float>(P);
    v_ = Dev<float>(P);
    const size_t B = c_.micro_batch, T = c_.seq, N = B * T, C = c_.hidden, F = c_.ffn, QKV = c_.qkv_width(),
                 NH = c_.heads, V = c_.vocab;
    for (int l = 0; l < c_.layers; ++l) {
      Acts a;
      a.ln1 = Dev<float>(N * C); a.ln1m = Dev<float>(N); a.ln1r = Dev<float>(N); a.qkv = Dev<float>(N * QKV);
      a.att = Dev<float>(B * NH * T * T); a.atty = Dev<float>(N * C); a.res2 = Dev<float>(N * C);
      a.ln2 = Dev<float>(N * C); a.ln2m = Dev<float>(N); a.ln2r = Dev<float>(N); a.fch = Dev<float>(N * F);
      a.fchg = Dev<float>(N * F); a.res3 = Dev<float>(N * C);
      acts_.push_back(std::move(a));
    }
    enc_ = Dev<float>(N * C); lnf_ = Dev<float>(N * C); lnfm_ = Dev<float>(N); lnfr_ = Dev<float>(N);
    logits_ = Dev<float>(N * V); losses_ = Dev<float>(N);
    dres_ = Dev<float>(N * C); dln_ = Dev<float>(N * C); datty_ = Dev<float>(N * C); dqkv_ = Dev<float>(N * QKV);
    datt_ = Dev<float>(B * NH * T * T); dfch_ = Dev<float>(N * F);
    tok_ = Dev<int32_t>(N); tgt_ = Dev<int32_t>(N);
  }
  float* p(const std::string& n) { return params_.p + layout_.find(n).offset; }
  float* g(const std::string& n) { return grads_.p + layout_.find(n).offset; }
  std::string head() const { return c_.tied ? "wte" : "lm_head.weight"; }
  const float* res_in(int l) const { return l == 0 ? enc_.p : acts_[l - 1].res3.p; }

  float forward(const int32_t* tok, const int32_t* tgt, std::vector<float>* logits_out) {
    const int B = c_.micro_batch, T = c_.seq, N = B * T, C = c_.hidden, F = c_.ffn, V = c_.vocab, NH = c_.heads,
              KVH = c_.kv_heads, hs = c_.head_size(), QKV = c_.qkv_width();
    tok_.upload(tok);
    tgt_.upload(tgt);
    k_embedding_fwd<<<blocks(size_t(N) * C), 256>>>(enc_.p, tok_.p, p("wte"), p("wpe"), N, T, C);
    for (int l = 0; l < c_.layers; ++l) {
      const std::string L = fmt::format("h.{}.", l);
      Acts& a = acts_[l];
      k_layernorm_fwd<<<N, row_threads(C)>>>(a.ln1.p, a.ln1m.p, a.ln1r.p, res_in(l), p(L + "ln1.weight"), p(L + "ln1.bias"), C);
      matmul_fwd(pr_, a.qkv.p, a.ln1.p, p(L + "attn.qkv.weight"), p(L + "attn.qkv.bias"), N, C, QKV, false);
      attention_fwd(pr_, a.atty.p, a.att.p, a.qkv.p, B, T, NH, KVH, hs);
      ck(cudaMemcpy(a.res2.p, res_in(l), sizeof(float) * N * C, cudaMemcpyDeviceToDevice), "D2D");
      matmul_fwd(pr_, a.res2.p, a.atty.p, p(L + "attn.proj.weight"), p(L + "attn.proj.bias"), N, C, C, true);
      k_layernorm_fwd<<<N, row_threads(C)>>>(a.ln2.p, a.ln2m.p, a.ln2r.p, a.res2.p, p(L + "ln2.weight"), p(L + "ln2.bias"), C);
      matmul_fwd(pr_, a.fch.p, a.ln2.p, p(L + "mlp.fc.weight"), p(L + "mlp.fc.bias"), N, C, F, false);
      k_gelu_fwd<<<blocks(size_t(N) * F), 256>>>(a.fchg.p, a.fch.p, size_t(N) * F);
      ck(cudaMemcpy(a.res3.p, a.res2.p, sizeof(float) * N * C, cudaMemcpyDeviceToDevice), "D2D");
      matmul_fwd(pr_, a.res3.p, a.fchg.p, p(L + "mlp.proj.weight"), p(L + "mlp.proj.bias"), N, F, C, true);
    }
    k_layernorm_fwd<<<N, row_threads(C)>>>(lnf_.p, lnfm_.p, lnfr_.p, res_in(c_.layers), p("lnf.weight"), p("lnf.bias"), C);
    matmul_fwd(pr_, logits_.p, lnf_.p, p(head()), p("lm_head.bias"), N, C, V, false);
    if (logits_out) *logits_out = logits_.download();
    k_ce_fwd<<<N, row_threads(V)>>>(logits_.p, losses_.p, logits_.p, tgt_.p, V);
    const auto l = losses_.download();
    double s = 0;
    for (float x : l) s += x;
    return float(s / N);
  }

  void backward() {
    const int B = c_.micro_batch, T = c_.seq, N = B * T, C = c_.hidden, F = c_.ffn, V = c_.vocab, NH = c_.heads,
              KVH = c_.kv_heads, hs = c_.head_size(), QKV = c_.qkv_width();
    ck(cudaMemset(grads_.p, 0, sizeof(float) * grads_.n), "cudaMemset");
    k_ce_bwd<<<blocks(size_t(N) * V), 256>>>(logits_.p, logits_.p, tgt_.p, 1.f / N, N, V);
    matmul_bwd(pr_, dln_.p, g(head()), g("lm_head.bias"), logits_.p, lnf_.p, p(head()), N, C, V);
    ck(cudaMemset(dres_.p, 0, sizeof(float) * dres_.n), "cudaMemset");
    k_layernorm_bwd<<<N, row_threads(C)>>>(dres_.p, g("lnf.weight"), g("lnf.bias"), dln_.p, res_in(c_.layers),
                                          p("lnf.weight"), lnfm_.p, lnfr_.p, C);
    for (int l = c_.layers - 1; l >= 0; --l) {
      const std::string L = fmt::format("h.{}.", l);
      Acts& a = acts_[l];
      matmul_bwd(pr_, dfch_.p, g(L + "mlp.proj.weight"), g(L + "mlp.proj.bias"), dres_.p, a.fchg.p, p(L + "mlp.proj.weight"), N, F, C);
      k_gelu_bwd<<<blocks(size_t(N) * F), 256>>>(dfch_.p, a.fch.p, dfch_.p, size_t(N) * F);
      matmul_bwd(pr_, dln_.p, g(L + "mlp.fc.weight"), g(L + "mlp.fc.bias"), dfch_.p, a.ln2.p, p(L + "mlp.fc.weight"), N, C, F);
      k_layernorm_bwd<<<N, row_threads(C)>>>(dres_.p, g(L + "ln2.weight"), g(L + "ln2.bias"), dln_.p, a.res2.p,
                                            p(L + "ln2.weight"), a.ln2m.p, a.ln2r.p, C);
      matmul_bwd(pr_, datty_.p, g(L + "attn.proj.weight"), g(L + "attn.proj.bias"), dres_.p, a.atty.p, p(L + "attn.proj.weight"), N, C, C);
      attention_bwd(pr_, dqkv_.p, datt_.p, datty_.p, a.qkv.p, a.att.p, B, T, NH, KVH, hs);
      matmul_bwd(pr_, dln_.p, g(L + "attn.qkv.weight"), g(L + "attn.qkv.bias"), dqkv_.p, a.ln1.p, p(L + "attn.qkv.weight"), N, C, QKV);
      k_layernorm_bwd<<<N, row_threads(C)>>>(dres_.p, g(L + "ln1.weight"), g(L + "ln1.bias"), dln_.p, res_in(l),
                                            p(L + "ln1.weight"), a.ln1m.p, a.ln1r.p, C);
    }
    k_embedding_bwd<<<blocks(size_t(N) * C), 256>>>(g("wte"), g("wpe"), dres_.p, tok_.p, N, T, C);
  }

  void update(const AdamWConfig& cfg, int t) {
    for (const auto& e : layout_.entries()) {
      const double wd = e.weight_decay ? cfg.weight_decay : 0.0;
      k_adamw<<<blocks(size_t(e.numel)), 256>>>(params_.p + e.offset, grads_.p + e.offset, m_.p + e.offset, v_.p + e.offset,
                                                size_t(e.numel), float(cfg.lr), float(cfg.beta1), float(cfg.beta2),
                                                float(1.0 - cfg.beta1), float(1.0 - cfg.beta2), float(cfg.eps),
                                                float(1.0 - cfg.lr * wd), float(1.0 - std::pow(cfg.beta1, t)),
                                                float(std::sqrt(1.0 - std::pow(cfg.beta2, t))));
    }
  }
  std::vector<float> params() const { return params_.download(); }
  std::vector<float> grads() const { return grads_.download(); }

 private:
  struct Acts {
    Dev<float> ln1, ln1m, ln1r, qkv, att, atty, res2, ln2, ln2m, ln2r, fch, fchg, res3;
  };
  GptConfig c_;
  Precision pr_;
  Layout layout_;
  Dev<float> params_, grads_, m_, v_;
  std::vector<Acts> acts_;
  Dev<float> enc_, lnf_, lnfm_, lnfr_, logits_, losses_, dres_, dln_, datty_, dqkv_, datt_, dfch_;
  Dev<int32_t> tok_, tgt_;
};

double rel(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - ref[i]) * (a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> randv(size_t n, std::mt19937& g, float s = 1.f) {
  std::normal_distribution<float> d(0.f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = fmt::format("CUDA error {}: {}", int(e), cudaGetErrorString(e));
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

std::string device_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown";
  return p.name;
}

double datasheet_peak(const std::string& name, Precision p) {
  // Dense (no sparsity) peaks from NVIDIA datasheets, FLOP/s: fp32 = non-tensor FP32 (cuBLAS
  // SGEMM without TF32), bf16 = tensor-core BF16 dense.
  struct Row { const char* key; double fp32, bf16; };
  static const Row kTable[] = {
      {"H200", 67e12, 989.4e12},      {"H100 SXM", 67e12, 989.4e12}, {"H100 80GB HBM3", 67e12, 989.4e12},
      {"H100 PCIe", 51e12, 756e12},   {"H100 NVL", 60e12, 835e12},   {"A100", 19.5e12, 312e12},
      {"L40S", 91.6e12, 362.05e12},   {"A10", 31.2e12, 125e12},      {"V100", 15.7e12, NAN},
  };
  for (const auto& r : kTable)
    if (name.find(r.key) != std::string::npos) return p == Precision::kFp32 ? r.fp32 : r.bf16;
  return NAN;
}

std::vector<ParityRow> layer_parity(Precision pr, unsigned seed) {
  std::mt19937 g(seed);
  const double tol_gemm = pr == Precision::kFp32 ? 1e-5 : 2e-2, tol_ew = 1e-5;
  std::vector<ParityRow> rows;
  const int B = 2, T = 70, NH = 4, KVH = 2, hs = 16, C = NH * hs, QKV = (NH + 2 * KVH) * hs, N = B * T, OC = 96, V = 300;
  {  // matmul forward and backward
    auto x = randv(size_t(N) * C, g), w = randv(size_t(OC) * C, g, 0.1f), b = randv(OC, g), d = randv(size_t(N) * OC, g);
    std::vector<float> out(size_t(N) * OC), dx(size_t(N) * C), dw(size_t(OC) * C, 0.f), db(OC, 0.f);
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
    Dev<float> X(x.data(), x.size()), W(w.data(), w.size()), Bb(b.data(), b.size()), D(d.data(), d.size()),
        O(out.size()), DX(dx.size()), DW(dw.size()), DB(db.size());
    matmul_fwd(pr, O.p, X.p, W.p, Bb.p, N, C, OC, false);
    matmul_bwd(pr, DX.p, DW.p, DB.p, D.p, X.p, W.p, N, C, OC);
    rows.push_back({"matmul_forward", rel(O.download(), out), tol_gemm});
    rows.push_back({"matmul_backward.dinp", rel(DX.download(), dx), tol_gemm});
    rows.push_back({"matmul_backward.dweight", rel(DW.download(), dw), tol_gemm});
    rows.push_back({"matmul_backward.dbias", rel(DB.download(), db), tol_ew});
  }
  {  // layernorm
    auto x = randv(size_t(N) * C, g), w = randv(C, g), b = randv(C, g), d = randv(size_t(N) * C, g);
    std::vector<float> out(x.size()), mean(N), rstd(N), dx(x.size(), 0.f), dw(C, 0.f), db(C, 0.f);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    Dev<float> X(x.data(), x.size()), W(w.data(), C), Bb(b.data(), C), D(d.data(), d.size()), O(x.size()), M(N), R(N),
        DX(x.size()), DW(C), DB(C);
    k_layernorm_fwd<<<N, row_threads(C)>>>(O.p, M.p, R.p, X.p, W.p, Bb.p, C);
    k_layernorm_bwd<<<N, row_threads(C)>>>(DX.p, DW.p, DB.p, D.p, X.p, W.p, M.p, R.p, C);
    rows.push_back({"layernorm_forward", rel(O.download(), out), tol_ew});
    rows.push_back({"layernorm_backward.dinp", rel(DX.download(), dx), tol_ew});
    rows.push_back({"layernorm_backward.dweight", rel(DW.download(), dw), tol_ew});
  }
  {  // attention (GQA, T = 70: two CPU row blocks)
    auto qkv = randv(size_t(N) * QKV, g), d = randv(size_t(N) * C, g);
    std::vector<float> out(size_t(N) * C), att(size_t(B) * NH * T * T), datt(att.size()), dqkv(qkv.size());
    attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hs);
    attention_backward(dqkv.data(), datt.data(), d.data(), qkv.data(), att.data(), B, T, NH, KVH, hs);
    Dev<float> Q(qkv.data(), qkv.size()), D(d.data(), d.size()), O(out.size()), A(att.size()), DA(att.size()), DQ(qkv.size());
    attention_fwd(pr, O.p, A.p, Q.p, B, T, NH, KVH, hs);
    attention_bwd(pr, DQ.p, DA.p, D.p, Q.p, A.p, B, T, NH, KVH, hs);
    rows.push_back({"attention_forward", rel(O.download(), out), tol_gemm});
    rows.push_back({"attention_backward", rel(DQ.download(), dqkv), pr == Precision::kFp32 ? 1e-4 : 5e-2});
  }
  {  // gelu, cross-entropy, adamw
    const size_t n = 5000;
    auto x = randv(n, g, 2.f), d = randv(n, g);
    std::vector<float> y(n), dx(n);
    gelu_forward(y.data(), x.data(), int64_t(n));
    gelu_backward(dx.data(), x.data(), d.data(), int64_t(n));
    Dev<float> X(x.data(), n), D(d.data(), n), Y(n), DX(n);
    k_gelu_fwd<<<blocks(n), 256>>>(Y.p, X.p, n);
    k_gelu_bwd<<<blocks(n), 256>>>(DX.p, X.p, D.p, n);
    rows.push_back({"gelu_forward", rel(Y.download(), y), tol_ew});
    rows.push_back({"gelu_backward", rel(DX.download(), dx), tol_ew});
    auto logits = randv(size_t(N) * V, g, 3.f);
    std::vector<int32_t> tgt(N);
    for (int i = 0; i < N; ++i) tgt[i] = (i * 37) % V;
    std::vector<float> probs(logits.size()), losses(N);
    crossentropy_forward(probs.data(), losses.data(), logits.data(), tgt.data(), N, V);
    Dev<float> L(logits.data(), logits.size()), P(logits.size()), LS(N);
    Dev<int32_t> TG(tgt.data(), N);
    k_ce_fwd<<<N, row_threads(V)>>>(P.p, LS.p, L.p, TG.p, V);
    rows.push_back({"crossentropy_forward.losses", rel(LS.download(), losses), tol_ew});
    crossentropy_backward(probs.data(), probs.data(), tgt.data(), 1.f, N, V);
    k_ce_bwd<<<blocks(size_t(N) * V), 256>>>(P.p, P.p, TG.p, 1.f / N, N, V);
    rows.push_back({"crossentropy_backward", rel(P.download(), probs), tol_ew});
    auto p = randv(n, g), gr = randv(n, g);
    std::vector<float> m(n, 0.f), v(n, 0.f);
    AdamWConfig cfg;
    Dev<float> Pp(p.data(), n), G(gr.data(), n), M(n), Vv(n);
    for (int t = 1; t <= 3; ++t) {
      adamw_update(p.data(), gr.data(), m.data(), v.data(), int64_t(n), cfg, cfg.weight_decay, t);
      k_adamw<<<blocks(n), 256>>>(Pp.p, G.p, M.p, Vv.p, n, float(cfg.lr), float(cfg.beta1), float(cfg.beta2),
                                  float(1 - cfg.beta1), float(1 - cfg.beta2), float(cfg.eps),
                                  float(1 - cfg.lr * cfg.weight_decay), float(1 - std::pow(cfg.beta1, t)),
                                  float(std::sqrt(1 - std::pow(cfg.beta2, t))));
    }
    rows.push_back({"adamw", rel(Pp.download(), p), tol_ew});
  }
  ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return rows;
}

std::vector<ParityRow> step_parity(const GptConfig& cfg, Precision pr, unsigned seed) {
  Gpt<float> cpu(cfg);
  cpu.init_weights(seed);
  GpuGpt gpu(cpu, pr);
  std::vector<int32_t> tok(size_t(cfg.tokens())), tgt(tok.size());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, seed, 0, 0, cfg.micro_batch, cfg.seq, cfg.vocab);
  std::vector<float> lc(size_t(cfg.tokens()) * cfg.vocab), lg;
  AdamWConfig adam;
  cpu.zero_grad();
  const float loss_c = cpu.forward(tok.data(), tgt.data(), lc.data());
  cpu.backward();
  std::vector<float> gc(cpu.grads(), cpu.grads() + cpu.layout().total());
  cpu.update(adam, 1);
  std::vector<float> pc(cpu.params(), cpu.params() + cpu.layout().total());
  const float loss_g = gpu.forward(tok.data(), tgt.data(), &lg);
  gpu.backward();
  const auto gg = gpu.grads();
  gpu.update(adam, 1);
  const auto pg = gpu.params();
  const bool f32 = pr == Precision::kFp32;
  return {{"loss", std::abs(loss_g - loss_c) / std::abs(loss_c), f32 ? 1e-5 : 1e-2},
          {"logits", rel(lg, lc), f32 ? 1e-5 : 2e-2},
          {"grads", rel(gg, gc), f32 ? 1e-4 : 5e-2},
          {"updated_params", rel(pg, pc), f32 ? 1e-5 : 1e-3}};
}

double measure_gemm_peak(int M, int N, int K, Precision pr) {
  std::mt19937 g(1);
  auto a = randv(size_t(M) * K, g), b = randv(size_t(N) * K, g);
  Dev<float> A(a.data(), a.size()), B(b.data(), b.size()), C(size_t(M) * N);
  gemm(pr, false, true, M, N, K, 1.f, A.p, K, B.p, K, 0.f, C.p, N);
  ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double best = 0, spent = 0;
  for (int i = 0; i < 200 && (i < 3 || spent < 0.3); ++i) {
    cudaEventRecord(e0);
    gemm(pr, false, true, M, N, K, 1.f, A.p, K, B.p, K, 0.f, C.p, N);
    cudaEventRecord(e1);
    ck(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    spent += ms / 1e3;
    best = std::max(best, 2.0 * M * N * K / (ms / 1e3));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

GpuStepTimes run_steps(const GptConfig& cfg, Precision pr, int warmup, int steps, unsigned seed) {
  Gpt<float> cpu(cfg);  // host copy of the initial weights and the layout
  cpu.init_weights(seed);
  GpuGpt gpu(cpu, pr);
  std::vector<int32_t> tok(size_t(cfg.tokens())), tgt(tok.size());
  GpuStepTimes out;
  auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  for (int s = 0; s < warmup + steps; ++s) {
    synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, seed, s, 0, cfg.micro_batch, cfg.seq, cfg.vocab);
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const double t0 = now();
    const float loss = gpu.forward(tok.data(), tgt.data(), nullptr);  // synchronises (loss download)
    const double t1 = now();
    gpu.backward();
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const double t2 = now();
    gpu.update(AdamWConfig{}, s + 1);
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const double t3 = now();
    if (s < warmup) continue;
    out.step.push_back(t3 - t0);
    out.forward.push_back(t1 - t0);
    out.backward.push_back(t2 - t1);
    out.optimizer.push_back(t3 - t2);
    out.loss.push_back(loss);
  }
  return out;
}

}  // namespace meshbench::parallel::cuda
