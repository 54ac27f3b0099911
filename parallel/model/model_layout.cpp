// Gpt<S>'s tables and closed forms, apart from the wiring in model.cpp: the local sizes of a
// tensor-parallel rank, the parameter table (layout, units, offsets; each entry's Shard), the
// full model's layout and canonical weights sliced by name, the memory formulas, and the
// synthetic data every rank can regenerate.
#include "model/model.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <fmt/core.h>

#include "core/hash.hpp"
#include "common/sharding.hpp"

namespace meshbench::parallel {

TpDims tp_dims(const GptConfig& c, const TpSpec& tp, const CpSpec& cp) {
  const int t = std::max(1, tp.size), hs = c.head_size();
  TpDims d{};
  d.heads = c.heads / t;
  d.kv_heads = c.kv_heads / t;
  d.ffn = c.ffn / t;
  d.attn_width = d.heads * hs;
  d.qkv = (d.heads + 2 * d.kv_heads) * hs;
  d.vocab = (c.vocab + t - 1) / t;
  d.vocab_first = tp.rank * d.vocab;
  d.vocab_valid = std::clamp(c.vocab - d.vocab_first, 0, d.vocab);
  d.tokens = c.micro_batch * c.seq / std::max(1, cp.size);
  d.rows = d.tokens / (tp.mode.sp ? t : 1);
  return d;
}

template <typename S>
typename Gpt<S>::ParamTable Gpt<S>::param_table(const GptConfig& cfg, const GptOptions& opts) {
  const TpDims d = meshbench::parallel::tp_dims(cfg, opts.tp);
  const int64_t L = cfg.layers, C = cfg.hidden, maxT = cfg.max_seq, hs = cfg.head_size();
  const int64_t mult = std::max<int64_t>(1, opts.unit_multiple);
  const int t = opts.tp.size;
  // Tensor-parallel slices (layout.hpp): column-parallel weights and biases by output rows
  // (qkv per part, so each rank holds whole query and key/value heads), row-parallel weights
  // by input columns, the vocabulary by rows of the padded table.
  auto rows = [&](std::vector<int64_t> parts = {}) {
    return t > 1 ? Shard{ShardRule::kRowSplit, opts.tp.rank, t, std::move(parts), -1} : Shard{};
  };
  const Shard cols = t > 1 ? Shard{ShardRule::kColSplit, opts.tp.rank, t, {}, -1} : Shard{};
  const Shard vocab = t > 1 ? Shard{ShardRule::kRowSplit, opts.tp.rank, t, {}, cfg.vocab} : Shard{};
  const std::vector<int64_t> qkv_parts = {int64_t{d.heads} * hs, int64_t{d.kv_heads} * hs, int64_t{d.kv_heads} * hs};
  ParamTable pt;
  Layout& lay = pt.layout;
  // Units in layout order; offsets inside a unit are kept relative to the unit's start.
  auto close_unit = [&](std::string name, int64_t lo) {
    lay.pad_unit(lo, mult);
    pt.units.push_back({std::move(name), lo, lay.total()});
  };
  // The stage (pipeline parallel): which blocks, and whether the embeddings and the head
  // live here; the whole model without one.
  const StageSpec whole{{{0, cfg.layers}}, true, true, 1};
  const StageSpec& st = opts.stage ? *opts.stage : whole;
  pt.lo.resize(static_cast<size_t>(L));
  pt.bu.assign(static_cast<size_t>(L), -1);
  if (st.first) {
    pt.wte = lay.add("wte", {d.vocab, C}, true, vocab);
    pt.wpe = lay.add("wpe", {maxT, C}, true);
    pt.embed_unit = 0;
    close_unit("embed", 0);
  }
  for (const auto& [lb, le] : st.chunks)
  for (int64_t l = lb; l < le; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    const int64_t u = (lay.total() + 15) / 16 * 16;
    LayerOffsets o{};
    o.ln1_w = lay.add(p + "ln1.weight", {C}, false) - u;
    o.ln1_b = lay.add(p + "ln1.bias", {C}, false) - u;
    o.ln2_w = lay.add(p + "ln2.weight", {C}, false) - u;
    o.ln2_b = lay.add(p + "ln2.bias", {C}, false) - u;
    o.qkv_w = lay.add(p + "attn.qkv.weight", {d.qkv, C}, true, rows(qkv_parts)) - u;
    o.qkv_b = lay.add(p + "attn.qkv.bias", {d.qkv}, false, rows(qkv_parts)) - u;
    o.proj_w = lay.add(p + "attn.proj.weight", {C, d.attn_width}, true, cols) - u;
    o.proj_b = lay.add(p + "attn.proj.bias", {C}, false) - u;
    int64_t experts = -1;  // with expert segments, where the MoE block's experts start
    if (cfg.is_moe(static_cast<int>(l))) {
      // the router and E (ep: E/ep) experts (moe.hpp); with expert segments the experts start
      // on a unit_multiple boundary
      const int64_t first = moe_add_params(lay, cfg, p, opts.ep, u, opts.expert_segments ? mult : 1);
      if (opts.expert_segments) experts = first;
    } else {
      o.fc_w = lay.add(p + "mlp.fc.weight", {d.ffn, C}, true, rows()) - u;
      o.fc_b = lay.add(p + "mlp.fc.bias", {d.ffn}, false, rows()) - u;
      o.fcproj_w = lay.add(p + "mlp.proj.weight", {C, d.ffn}, true, cols) - u;
      o.fcproj_b = lay.add(p + "mlp.proj.bias", {C}, false) - u;
    }
    pt.lo[static_cast<size_t>(l)] = o;
    pt.bu[static_cast<size_t>(l)] = static_cast<int>(pt.units.size());
    close_unit(fmt::format("h.{}", l), u);
    pt.units.back().experts_lo = experts;
  }
  if (st.last) {
    const int64_t hu = (lay.total() + 15) / 16 * 16;
    pt.lnf_w = lay.add("lnf.weight", {C}, false) - hu;
    pt.lnf_b = lay.add("lnf.bias", {C}, false) - hu;
    // A tied head reads the embedding unit's wte, or on a last stage without it its own copy.
    pt.head_w = cfg.tied && st.first ? pt.wte
                                     : lay.add(cfg.tied ? "wte" : "lm_head.weight", {d.vocab, C}, true, vocab) - hu;
    pt.head_b = lay.add("lm_head.bias", {d.vocab}, false, vocab) - hu;
    pt.head_unit = static_cast<int>(pt.units.size());
    close_unit("head", hu);
  }
  return pt;
}

template <typename S>
int64_t Gpt<S>::expert_segment_elements(const GptConfig& cfg, const GptOptions& opts) {
  int64_t n = 0;
  for (const Unit& u : param_table(cfg, opts).units) n += u.experts_lo >= 0 ? u.hi - u.experts_lo : 0;
  return n;
}

template <typename S>
Layout Gpt<S>::full_layout(const GptConfig& cfg) {
  return param_table(cfg, GptOptions{}).layout;
}

template <typename S>
int64_t Gpt<S>::flat_elements(const GptConfig& cfg, const GptOptions& opts) {
  return param_table(cfg, opts).layout.total();
}

template <typename S>
std::vector<S> Gpt<S>::canonical_weights(uint64_t seed) const {
  // The full model's weights in its layout's entry order, so every plan starts identical.
  const Layout full = full_layout(cfg_);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<S> whole(static_cast<size_t>(full.total()), S(0));
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  for (const auto& e : full.entries()) {
    S* p = whole.data() + e.offset;
    const bool is_norm_weight = e.name.find("ln") != std::string::npos &&
                                e.name.find(".weight") != std::string::npos;
    if (is_norm_weight) {
      for (int64_t i = 0; i < e.numel; ++i) p[i] = S(1);
    } else if (e.shape.size() == 2) {
      const bool residual_proj = e.name.find(".proj.weight") != std::string::npos;
      const double sd = residual_proj ? proj_std : 0.02;
      for (int64_t i = 0; i < e.numel; ++i) p[i] = static_cast<S>(sd * normal(rng));
    }  // biases stay 0
  }
  std::vector<S> host(static_cast<size_t>(layout_.total()), S(0));
  take_from_full(full, whole.data(), layout_, host.data());
  return host;
}

template <typename S>
MemoryBytes Gpt<S>::memory_analytic(const GptConfig& c, int64_t sb, const TpSpec& tp, const CpSpec& cp,
                                    const EpSpec& ep, bool flash, bool recompute_attention, int recompute_blocks) {
  // Closed forms, written independently of the layout tables (padding not counted). With
  // tensor parallel, t ranks each hold 1/t of the heads, the MLP width and the padded
  // vocabulary; sequence parallel keeps the norm/residual regions at N/t rows. Context
  // parallel holds N = B T / cp token rows; its attention keeps per layer a log-sum-exp per
  // row and head (ring, all-gather) or the gathered heads' q, k, v, probabilities and output
  // (Ulysses) instead of the B x NH x T x T probabilities, plus its transfer buffers.
  const int64_t t = std::max(1, tp.size), L = c.layers, C = c.hidden, hs = c.head_size(), cpn = std::max(1, cp.size);
  const int64_t F = c.ffn / t, NH = c.heads / t, KVH = c.kv_heads / t, Ca = NH * hs, QKV = (NH + 2 * KVH) * hs;
  const int64_t V = (c.vocab + t - 1) / t, maxT = c.max_seq, B = c.micro_batch, T = c.seq, N = B * T / cpn;
  int64_t att = B * NH * T * T, cp_buf = 0, datt = B * NH * T * T;  // per layer; buffers
  if (flash) att = B * NH * T, datt = 0;  // the row log-sum-exp; the backward recomputes its tiles
  // --recompute selective: the probabilities and output (flash: the log-sum-exp alone, its output
  // written again in place), once, as scratch
  int64_t recompute_buf = 0;
  if (recompute_attention && cpn == 1) recompute_buf = att + (flash ? 0 : B * T * NH * hs), att = 0;
  if (cpn > 1) {
    const int64_t kv = N * 2 * KVH * hs, NHu = NH / cpn, wu = (NHu + 2 * (KVH / cpn)) * hs;
    datt = 0;
    switch (cp.algo) {
      case CpAlgo::kRing: att = N * NH, cp_buf = 4 * kv + N * NH; break;
      case CpAlgo::kAllGather: att = N * NH, cp_buf = 2 * kv + 2 * cpn * kv + N * NH; break;
      case CpAlgo::kUlysses:  // flash: the head group's log-sum-exp, no probabilities nor their gradient
        att = B * T * wu + (flash ? B * NHu * T : B * NHu * T * T) + B * T * NHu * hs;
        cp_buf = 3 * B * T * wu + B * T * NHu * hs + (flash ? 0 : B * NHu * T * T);
        break;
    }
  }
  const bool par = t > 1, sp = par && tp.mode.sp, keep = sp && !tp.mode.regather;
  const int64_t n = sp ? N / t : N;
  const int64_t per_layer = 4 * C + QKV * C + QKV + C * Ca + C + F * C + F + C * F + C;
  const int64_t P = V * C + maxT * C + L * per_layer + 2 * C + (c.tied ? 0 : V * C) + V;
  MemoryBytes m;
  m.params = P * sb;
  m.grads = P * sb;
  m.optimizer = 2 * P * sb;
  // per layer: ln1, res2, ln2, res3 and 4 norm statistics on n rows; qkv, atty, 2 x fch, att
  // on all N rows; SP keeping its gathers: ln1 and ln2 gathered (N x C each)
  // (each activation entry starts 16-element aligned, as the layout places it: an entry of x
  // elements takes a16(x) but the last, the losses)
  const auto a16 = [](int64_t x) { return (x + 15) / 16 * 16; };
  const int64_t act_layer = 4 * a16(n * C) + 4 * a16(n) + a16(N * QKV) + a16(N * Ca) + 2 * a16(N * F) + a16(att) +
                            (keep ? 2 * a16(N * C) : 0);
  m.activations =
      (L * act_layer + 2 * a16(n * C) + 2 * a16(n) + (keep ? a16(N * C) : 0) + a16(N * V) + N) * sb;
  m.buffers = (n * C + N * C + N * Ca + N * QKV + datt + N * F + cp_buf + recompute_buf) * sb + 2 * N * 4;
  if (par) m.buffers += ((N + n) * C + 3 * N) * sb;                       // row outputs, CE statistics
  if (sp) m.buffers += (2 * N * C + (keep ? 0 : N * C)) * sb;              // gathered gradients, re-gathers
  const MoeMemory moe = moe_memory(c, sb, ep, static_cast<int>(t), moe_tokens(tp, cp));  // against the dense MLPs
  m.params += moe.param_elements * sb;
  m.grads += moe.param_elements * sb;
  m.optimizer += 2 * moe.param_elements * sb;
  m.activations += moe.activation_bytes;
  m.buffers += moe.buffer_bytes;
  // --recompute full: the first R blocks keep only their output (res3); the rest of one
  // block's activations, the largest of theirs, is scratch (buffers). A MoE block's extra
  // (its activations less the dense fch, fch_gelu it replaces; the routing ints stay) moves too.
  const int64_t R = std::min<int64_t>(recompute_blocks, L);
  if (R > 0) {
    const int64_t moe_extra = moe.block_float_bytes;
    const int64_t dense = (act_layer - a16(n * C)) * sb;  // a recomputed block's scratch
    int64_t scratch = 0;
    for (int l = 0; l < R; ++l) {
      const int64_t b = dense + (c.is_moe(l) ? moe_extra : 0);
      m.activations -= b;
      scratch = std::max(scratch, b);
    }
    m.buffers += scratch;
  }
  return m;
}

template <typename S>
std::vector<char> Gpt<S>::recomputed_blocks(const GptConfig& c, const GptOptions& o) {
  std::vector<char> r(static_cast<size_t>(c.layers), 0);
  const auto chunks = o.stage ? o.stage->chunks : std::vector<std::pair<int, int>>{{0, c.layers}};
  for (const auto& [lo, hi] : chunks)
    for (int l = lo; l < hi && l - lo < o.recompute_blocks; ++l) r[static_cast<size_t>(l)] = 1;
  return r;
}

// The members defined here, for both scalar types (the class is instantiated in model.cpp).
#define MB_LAYOUT_INSTANTIATE(S)                                                                    \
  template Gpt<S>::ParamTable Gpt<S>::param_table(const GptConfig&, const GptOptions&);            \
  template Layout Gpt<S>::full_layout(const GptConfig&);                                           \
  template int64_t Gpt<S>::flat_elements(const GptConfig&, const GptOptions&);                     \
  template int64_t Gpt<S>::expert_segment_elements(const GptConfig&, const GptOptions&);           \
  template std::vector<S> Gpt<S>::canonical_weights(uint64_t) const;                               \
  template std::vector<char> Gpt<S>::recomputed_blocks(const GptConfig&, const GptOptions&);        \
  template MemoryBytes Gpt<S>::memory_analytic(const GptConfig&, int64_t, const TpSpec&, const CpSpec&, \
                                               const EpSpec&, bool, bool, int);
MB_LAYOUT_INSTANTIATE(float)
MB_LAYOUT_INSTANTIATE(double)

void synthetic_batch(int32_t* tokens, int32_t* targets, DataKind kind, uint64_t seed,
                     int64_t step, int64_t first_sample, int B, int T, int V) {
  for (int b = 0; b < B; ++b) {
    const uint64_t sample = static_cast<uint64_t>(first_sample + b);
    for (int t = 0; t <= T; ++t) {
      uint64_t h;
      if (kind == DataKind::kRandom) {
        h = core::mix64(core::mix64(core::mix64(seed) ^ static_cast<uint64_t>(step)) ^ sample) ^ static_cast<uint64_t>(t);
        h = core::mix64(h);
      } else {
        h = core::mix64(core::mix64(seed) ^ static_cast<uint64_t>(t % 8));
      }
      const int32_t id = static_cast<int32_t>(h % static_cast<uint64_t>(V));
      if (t < T) tokens[b * T + t] = id;
      if (t > 0) targets[b * T + t - 1] = id;
    }
  }
}

}  // namespace meshbench::parallel
