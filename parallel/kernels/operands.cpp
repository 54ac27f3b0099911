// GEMM plans of the device backends (operands.hpp): offsets of every head's column slice.
#include "kernels/operands.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace meshbench::parallel {

const char* array_name(Array a) {
  switch (a) {
    case Array::kInp: return "inp";
    case Array::kWeight: return "weight";
    case Array::kOut: return "out";
    case Array::kDout: return "dout";
    case Array::kDinp: return "dinp";
    case Array::kDweight: return "dweight";
    case Array::kQkv: return "qkv";
    case Array::kAtt: return "att";
    case Array::kDatt: return "datt";
    case Array::kDqkv: return "dqkv";
    case Array::kQ: return "q";
    case Array::kK: return "k";
    case Array::kV: return "v";
    case Array::kO: return "o";
    case Array::kS: return "s";
    case Array::kDs: return "ds";
    case Array::kOpair: return "opair";
    case Array::kDq: return "dq";
    case Array::kDk: return "dk";
    case Array::kDv: return "dv";
    case Array::kCount: break;
  }
  return "?";
}

int64_t numel(const MatmulShape& s, Array a) {
  const int64_t N = s.N, C = s.C, OC = s.OC;
  switch (a) {
    case Array::kInp: case Array::kDinp: return N * C;
    case Array::kWeight: case Array::kDweight: return OC * C;
    case Array::kOut: case Array::kDout: return N * OC;
    default: return 0;
  }
}

int64_t numel(const AttentionShape& s, Array a) {
  const int64_t B = s.B, T = s.T, NH = s.NH;
  switch (a) {
    case Array::kQkv: case Array::kDqkv: return B * T * s.QKV();
    case Array::kAtt: case Array::kDatt: return B * NH * T * T;
    case Array::kOut: case Array::kDout: return B * T * s.C();
    default: return 0;
  }
}

int64_t numel(const ChunkShape& s, Array a) {
  const int64_t B = s.B, Tq = s.Tq, Tk = s.Tk, NH = s.NH, hs = s.hs;
  switch (a) {
    case Array::kQ: return B * Tq * s.ldq;
    case Array::kK: return B * Tk * s.ldk;
    case Array::kV: return B * Tk * s.ldv;
    case Array::kO: return B * Tq * s.ldo;
    case Array::kDout: return B * Tq * s.lddo;
    case Array::kDq: return B * Tq * s.lddq;
    case Array::kDk: return B * Tk * s.lddk;
    case Array::kDv: return B * Tk * s.lddv;
    case Array::kS: case Array::kDs: return B * NH * Tq * Tk;
    case Array::kOpair: return B * Tq * NH * hs;
    default: return 0;
  }
}

GemmPlan matmul_forward_gemm(const MatmulShape& s) {
  const int N = s.N, C = s.C, OC = s.OC;
  return {false, true, N, OC, C, 1.f, 1.f,
          {Array::kInp, 0, N, C, C}, {Array::kWeight, 0, OC, C, C}, {Array::kOut, 0, N, OC, OC}};
}

std::array<GemmPlan, 2> matmul_backward_gemms(const MatmulShape& s) {
  const int N = s.N, C = s.C, OC = s.OC;
  return {{{false, false, N, C, OC, 1.f, 0.f, {Array::kDout, 0, N, OC, OC},
            {Array::kWeight, 0, OC, C, C}, {Array::kDinp, 0, N, C, C}},
           {true, false, OC, C, N, 1.f, 1.f, {Array::kDout, 0, N, OC, OC},
            {Array::kInp, 0, N, C, C}, {Array::kDweight, 0, OC, C, C}}}};
}

namespace {
struct Heads {  // offsets of sample b's rows and head h's column slices
  int64_t qkv_row0, y_row0, att0;
  int q, k, v;  // column of Q head h, of its K and V heads
};
Heads heads(const AttentionShape& s, int b, int h) {
  const int64_t T = s.T;
  const int kv = h / (s.NH / s.KVH);
  return {b * T * s.QKV(), b * T * s.C(), (int64_t(b) * s.NH + h) * T * T, h * s.hs,
          (s.NH + kv) * s.hs, (s.NH + s.KVH + kv) * s.hs};
}
}  // namespace

std::array<GemmPlan, 2> attention_forward_gemms(const AttentionShape& s, int b, int h) {
  const int T = s.T, hs = s.hs, QKV = s.QKV(), C = s.C();
  const float scale = 1.f / std::sqrt(float(hs));
  const Heads x = heads(s, b, h);
  return {{{false, true, T, T, hs, scale, 0.f, {Array::kQkv, x.qkv_row0 + x.q, T, hs, QKV},
            {Array::kQkv, x.qkv_row0 + x.k, T, hs, QKV}, {Array::kAtt, x.att0, T, T, T}},
           {false, false, T, hs, T, 1.f, 0.f, {Array::kAtt, x.att0, T, T, T},
            {Array::kQkv, x.qkv_row0 + x.v, T, hs, QKV}, {Array::kOut, x.y_row0 + h * hs, T, hs, C}}}};
}

std::array<GemmPlan, 4> attention_backward_gemms(const AttentionShape& s, int b, int h) {
  const int T = s.T, hs = s.hs, QKV = s.QKV(), C = s.C();
  const float scale = 1.f / std::sqrt(float(hs));
  const Heads x = heads(s, b, h);
  const View dy{Array::kDout, x.y_row0 + h * hs, T, hs, C};
  const View att{Array::kAtt, x.att0, T, T, T}, datt{Array::kDatt, x.att0, T, T, T};
  return {{{false, true, T, T, hs, 1.f, 0.f, dy, {Array::kQkv, x.qkv_row0 + x.v, T, hs, QKV}, datt},
           {false, false, T, hs, T, scale, 0.f, datt, {Array::kQkv, x.qkv_row0 + x.k, T, hs, QKV},
            {Array::kDqkv, x.qkv_row0 + x.q, T, hs, QKV}},
           {true, false, T, hs, T, scale, 1.f, datt, {Array::kQkv, x.qkv_row0 + x.q, T, hs, QKV},
            {Array::kDqkv, x.qkv_row0 + x.k, T, hs, QKV}},
           {true, false, T, hs, T, 1.f, 1.f, att, dy, {Array::kDqkv, x.qkv_row0 + x.v, T, hs, QKV}}}};
}

bool plan_consistent(const GemmPlan& g) {
  auto ok = [](const View& v, int rows, int cols) {
    return v.offset >= 0 && v.rows == rows && v.cols == cols && v.ld >= cols;
  };
  return ok(g.a, g.ta ? g.K : g.M, g.ta ? g.M : g.K) && ok(g.b, g.tb ? g.N : g.K, g.tb ? g.K : g.N) &&
         ok(g.c, g.M, g.N);
}

GemmPlan batch_entry(const GemmBatch& g, int i) {
  GemmPlan p = g.first;
  p.a.offset += i * g.sa;
  p.b.offset += i * g.sb;
  p.c.offset += i * g.sc;
  return p;
}

namespace {
bool same_but_offsets(const GemmPlan& x, const GemmPlan& y) {
  auto same = [](const View& u, const View& v) {
    return u.array == v.array && u.rows == v.rows && u.cols == v.cols && u.ld == v.ld;
  };
  return x.ta == y.ta && x.tb == y.tb && x.M == y.M && x.N == y.N && x.K == y.K && x.alpha == y.alpha &&
         x.beta == y.beta && same(x.a, y.a) && same(x.b, y.b) && same(x.c, y.c);
}
}  // namespace

// Per sample b and index j inside a KV group, one batch over the groups g (query head
// h = g NH/KVH + j); checks that every entry is the per-head plan it stands for.
template <typename Plan>
std::vector<GemmBatch> group_batches(int B, int NH, int KVH, const Plan& plan, const char* who) {
  const int G = NH / KVH;  // query heads per KV group
  std::vector<GemmBatch> out;
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < G; ++j) {
      GemmBatch g;
      g.first = plan(b, j);
      g.count = KVH;
      if (KVH > 1) {
        const GemmPlan second = plan(b, G + j);
        g.sa = second.a.offset - g.first.a.offset;
        g.sb = second.b.offset - g.first.b.offset;
        g.sc = second.c.offset - g.first.c.offset;
      }
      for (int k = 0; k < KVH; ++k) {
        const GemmPlan want = plan(b, k * G + j), got = batch_entry(g, k);
        if (!same_but_offsets(want, got) || want.a.offset != got.a.offset || want.b.offset != got.b.offset ||
            want.c.offset != got.c.offset)
          throw std::logic_error(std::string(who) + ": the per-head GEMMs are not strided over the KV groups");
      }
      out.push_back(g);
    }
  return out;
}

std::vector<GemmBatch> attention_batches(const AttentionShape& s, bool backward, int which) {
  return group_batches(s.B, s.NH, s.KVH, [&](int b, int h) {
    return backward ? attention_backward_gemms(s, b, h)[static_cast<size_t>(which)]
                    : attention_forward_gemms(s, b, h)[static_cast<size_t>(which)];
  }, "attention_batches");
}

std::array<GemmPlan, 2> chunk_forward_gemms(const ChunkShape& s, int b, int h) {
  const int Tq = s.Tq, Tk = s.Tk, hs = s.hs, kvh = h / (s.NH / s.KVH);
  const float scale = 1.f / std::sqrt(float(hs));
  const int64_t q = int64_t(b) * Tq * s.ldq + int64_t(h) * hs, k = int64_t(b) * Tk * s.ldk + int64_t(kvh) * hs,
                v = int64_t(b) * Tk * s.ldv + int64_t(kvh) * hs, sc = (int64_t(b) * s.NH + h) * Tq * Tk,
                op = int64_t(b) * Tq * s.NH * hs + int64_t(h) * hs;
  return {GemmPlan{false, true, Tq, Tk, hs, scale, 0.f, {Array::kQ, q, Tq, hs, s.ldq}, {Array::kK, k, Tk, hs, s.ldk},
                   {Array::kS, sc, Tq, Tk, Tk}},
          GemmPlan{false, false, Tq, hs, Tk, 1.f, 0.f, {Array::kS, sc, Tq, Tk, Tk}, {Array::kV, v, Tk, hs, s.ldv},
                   {Array::kOpair, op, Tq, hs, s.NH * hs}}};
}

std::array<GemmPlan, 5> chunk_backward_gemms(const ChunkShape& s, int b, int h) {
  const int Tq = s.Tq, Tk = s.Tk, hs = s.hs, kvh = h / (s.NH / s.KVH);
  const int64_t sc = (int64_t(b) * s.NH + h) * Tq * Tk, dy = int64_t(b) * Tq * s.lddo + int64_t(h) * hs,
                q = int64_t(b) * Tq * s.ldq + int64_t(h) * hs, k = int64_t(b) * Tk * s.ldk + int64_t(kvh) * hs,
                v = int64_t(b) * Tk * s.ldv + int64_t(kvh) * hs, dq = int64_t(b) * Tq * s.lddq + int64_t(h) * hs,
                dk = int64_t(b) * Tk * s.lddk + int64_t(kvh) * hs, dv = int64_t(b) * Tk * s.lddv + int64_t(kvh) * hs;
  const std::array<GemmPlan, 2> f = chunk_forward_gemms(s, b, h);
  return {f[0],
          // dV (Tk x hs) += P^T dO: P stored (Tq, Tk)
          GemmPlan{true, false, Tk, hs, Tq, 1.f, 1.f, {Array::kS, sc, Tq, Tk, Tk}, {Array::kDout, dy, Tq, hs, s.lddo},
                   {Array::kDv, dv, Tk, hs, s.lddv}},
          // dP (Tq x Tk) = dO V^T
          GemmPlan{false, true, Tq, Tk, hs, 1.f, 0.f, {Array::kDout, dy, Tq, hs, s.lddo}, {Array::kV, v, Tk, hs, s.ldv},
                   {Array::kDs, sc, Tq, Tk, Tk}},
          // dQ (Tq x hs) += dS K
          GemmPlan{false, false, Tq, hs, Tk, 1.f, 1.f, {Array::kDs, sc, Tq, Tk, Tk}, {Array::kK, k, Tk, hs, s.ldk},
                   {Array::kDq, dq, Tq, hs, s.lddq}},
          // dK (Tk x hs) += dS^T Q
          GemmPlan{true, false, Tk, hs, Tq, 1.f, 1.f, {Array::kDs, sc, Tq, Tk, Tk}, {Array::kQ, q, Tq, hs, s.ldq},
                   {Array::kDk, dk, Tk, hs, s.lddk}}};
}

std::vector<GemmBatch> chunk_batches(const ChunkShape& s, bool backward, int which) {
  return group_batches(s.B, s.NH, s.KVH, [&](int b, int h) {
    return backward ? chunk_backward_gemms(s, b, h)[static_cast<size_t>(which)]
                    : chunk_forward_gemms(s, b, h)[static_cast<size_t>(which)];
  }, "chunk_batches");
}

}  // namespace meshbench::parallel
