#include "context_parallel/attention.hpp"

#include <utility>

#include "kernels/layers.hpp"

namespace meshbench::parallel {

CpChunks cp_chunks(int T, const CpSpec& cp, int rank) {
  CpChunks c;
  if (cp.size <= 1) {
    c.len = T;
  } else if (cp.zigzag) {  // chunks r and 2C-1-r of 2C
    c.count = 2;
    c.len = T / (2 * cp.size);
    c.start[0] = rank * c.len;
    c.start[1] = (2 * cp.size - 1 - rank) * c.len;
  } else {
    c.len = T / cp.size;
    c.start[0] = rank * c.len;
  }
  return c;
}

void cp_local_rows(std::vector<int>& rows, int B, int T, const CpSpec& cp) {
  const CpChunks c = cp_chunks(T, cp, cp.rank);
  rows.clear();
  for (int k = 0; k < c.count; ++k)
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < c.len; ++i) rows.push_back(b * T + c.start[k] + i);
}

template <typename S>
CpAttention<S>::CpAttention(int B, int T, int NH, int KVH, int hs, const CpSpec& cp, Backend<S>& be, MemoryTracker* mem,
                            bool flash)
    : B_(B), T_(T), NH_(NH), KVH_(KVH), hs_(hs), cp_(cp), flash_(flash), be_(be), mine_(cp_chunks(T, cp, cp.rank)) {
  const MemCat kBuf = MemCat::kBuffers;
  const int64_t n = rows() * 2 * kvw(), C = cp.size;
  auto alloc = [&](BackendArray<S, S>& a, int64_t elems) { a = BackendArray<S, S>(be, elems, mem, kBuf); };
  switch (cp.algo) {
    case CpAlgo::kRing:
      alloc(kv_, n), alloc(kv2_, n), alloc(dkv_, n), alloc(dkv2_, n), alloc(D_, rows() * NH);
      break;
    case CpAlgo::kAllGather:
      alloc(kv_, n), alloc(dkv_, n), alloc(all_, C * n), alloc(dall_, C * n), alloc(D_, rows() * NH);
      break;
    case CpAlgo::kUlysses: {
      const int64_t wu = int64_t{NH / C + 2 * (KVH / C)} * hs, full = int64_t{B} * T;
      alloc(send_, full * wu), alloc(recv_, full * wu), alloc(all_, full * wu);  // all_: dqkv of the sequence
      alloc(dall_, full * (NH / C) * hs);                                        // datty of the sequence
      if (!flash_) alloc(dkv_, int64_t{B} * (NH / C) * T * T);                     // the probabilities' gradient
      break;
    }
  }
}

template <typename S>
int64_t CpAttention<S>::acts_per_layer() const {
  if (cp_.algo != CpAlgo::kUlysses) return rows() * NH_;  // lse per local row and head
  const int64_t C = cp_.size, NHu = NH_ / C, full = int64_t{B_} * T_;
  return full * (NHu + 2 * (KVH_ / C)) * hs_ + ulysses_att() + full * NHu * hs_;
}

template <typename S>
double CpAttention<S>::pair_flops(bool backward) const {
  const double prod = 2.0 * B_ * NH_ * double(mine_.len) * mine_.len * hs_;  // one product, Tq x Tk x hs
  return (backward ? 5 : 2) * prod;  // forward QK^T, PV; backward S again, dP, dQ, dK, dV
}

template <typename S>
void CpAttention<S>::pairs_with(int j, std::vector<Pair>& out) const {
  out.clear();
  const CpChunks theirs = cp_chunks(T_, cp_, j);
  for (int a = 0; a < mine_.count; ++a)
    for (int k = 0; k < theirs.count; ++k)
      if (cp_pair_sees(mine_, a, theirs, k)) out.push_back({a, j, k});
}

template <typename S>
void CpAttention<S>::chunk_forward(const ComputeOp& run, S* atty, S* lse, const S* qkv, const S* kv, const Pair& p,
                                   bool first) {
  const int64_t chunk = int64_t{B_} * mine_.len;  // rows of one chunk
  const int QKV = qkvw(), Cw = NH_ * hs_, w2 = 2 * kvw();
  const S* q = qkv + p.q_chunk * chunk * QKV;
  const S* k = kv + p.k_chunk * chunk * w2;
  S* o = atty + p.q_chunk * chunk * Cw;
  S* l = lse + p.q_chunk * chunk * NH_;
  const int q0 = mine_.start[p.q_chunk], k0 = cp_chunks(T_, cp_, p.k_rank).start[p.k_chunk];
  run({Op::kAttention, "chunk.fwd", 0, 0, 0, pair_flops(false)}, [&] { be_.attention_chunk_forward(o, Cw, l, q, QKV, k, w2, k + kvw(), w2, B_, mine_.len, mine_.len, NH_, KVH_,
                                        hs_, q0, k0, first); });
}

template <typename S>
void CpAttention<S>::chunk_backward(const ComputeOp& run, S* dqkv, S* dkv, const S* datty, const S* D, const S* lse,
                                    const S* qkv, const S* kv, const Pair& p) {
  const int64_t chunk = int64_t{B_} * mine_.len;
  const int QKV = qkvw(), Cw = NH_ * hs_, w2 = 2 * kvw();
  const int64_t qo = p.q_chunk * chunk, ko = p.k_chunk * chunk;
  const int q0 = mine_.start[p.q_chunk], k0 = cp_chunks(T_, cp_, p.k_rank).start[p.k_chunk];
  run({Op::kAttention, "chunk.bwd", 0, 0, 0, pair_flops(true)}, [&] { be_.attention_chunk_backward(dqkv + qo * QKV, QKV, dkv + ko * w2, w2, dkv + ko * w2 + kvw(), w2,
                                         datty + qo * Cw, Cw, D + qo * NH_, lse + qo * NH_, qkv + qo * QKV, QKV,
                                         kv + ko * w2, w2, kv + ko * w2 + kvw(), w2, B_, mine_.len, mine_.len, NH_,
                                         KVH_, hs_, q0, k0); });
}

template <typename S>
void CpAttention<S>::rowdots(const ComputeOp& run, const S* datty, const S* atty) {
  const int64_t chunk = int64_t{B_} * mine_.len;
  const int Cw = NH_ * hs_;
  run({Op::kAttention, "rowdot", 0, 0, 0, 0.0}, [&] {
    for (int a = 0; a < mine_.count; ++a)
      be_.attention_rowdot(D_.data() + a * chunk * NH_, datty + a * chunk * Cw, Cw, atty + a * chunk * Cw, Cw, B_,
                           mine_.len, NH_, hs_);
  });
}

template <typename S>
void CpAttention<S>::ring_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* lse, const S* qkv) {
  const int C = cp_.size, r = cp_.rank, next = (r + 1) % C, prev = (r + C - 1) % C;
  const int64_t n = rows() * 2 * kvw();
  run({Op::kCopy, "kv.copy", 0, 0, 0, 0.0}, [&] { be_.copy_2d(kv_.data(), 2 * kvw(), qkv + NH_ * hs_, qkvw(), rows(), 2 * kvw()); });
  S* held = kv_.data();
  S* spare = kv2_.data();
  bool first[2] = {true, true};
  std::vector<Pair> pairs;
  for (int s = 0; s < C; ++s) {
    int h = -1;
    if (s < C - 1 && cp_.overlap) h = cp.post_exchange(held, next, spare, prev, n);
    pairs_with((r - s + C) % C, pairs);
    for (const Pair& p : pairs) {
      chunk_forward(run, atty, lse, qkv, held, p, first[p.q_chunk]);
      first[p.q_chunk] = false;
    }
    if (s == C - 1) break;
    if (!cp_.overlap) h = cp.post_exchange(held, next, spare, prev, n);
    cp.wait(h);
    std::swap(held, spare);
  }
}

template <typename S>
void CpAttention<S>::ring_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* lse,
                                   const S* qkv) {
  const int C = cp_.size, r = cp_.rank, next = (r + 1) % C, prev = (r + C - 1) % C;
  const int64_t n = rows() * 2 * kvw();
  run({Op::kCopy, "kv.copy", 0, 0, 0, 0.0}, [&] {
    be_.zero(dqkv, sizeof(S) * static_cast<size_t>(rows() * qkvw()));
    be_.zero(dkv_.data(), dkv_.bytes());
    be_.copy_2d(kv_.data(), 2 * kvw(), qkv + NH_ * hs_, qkvw(), rows(), 2 * kvw());
  });
  S* held = kv_.data();
  S* spare = kv2_.data();
  S* dheld = dkv_.data();
  S* dspare = dkv2_.data();
  std::vector<Pair> pairs;
  for (int s = 0; s < C; ++s) {
    int h = -1;
    if (s < C - 1 && cp_.overlap) h = cp.post_exchange(held, next, spare, prev, n);
    pairs_with((r - s + C) % C, pairs);
    for (const Pair& p : pairs) chunk_backward(run, dqkv, dheld, datty, D_.data(), lse, qkv, held, p);
    if (s < C - 1 && !cp_.overlap) h = cp.post_exchange(held, next, spare, prev, n);
    // The block's K/V gradient moves on with it; after the last step it is home.
    cp.wait(cp.post_exchange(dheld, next, dspare, prev, n));
    std::swap(dheld, dspare);
    if (s < C - 1) {
      cp.wait(h);
      std::swap(held, spare);
    }
  }
  run({Op::kCopy, "dkv.add", 0, 0, 0, 0.0}, [&] { be_.add_2d(dqkv + NH_ * hs_, qkvw(), dheld, 2 * kvw(), rows(), 2 * kvw()); });
}

template <typename S>
void CpAttention<S>::gather_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* lse, const S* qkv) {
  const int64_t n = rows() * 2 * kvw();
  run({Op::kCopy, "kv.copy", 0, 0, 0, 0.0}, [&] { be_.copy_2d(kv_.data(), 2 * kvw(), qkv + NH_ * hs_, qkvw(), rows(), 2 * kvw()); });
  cp.all_gather(all_.data(), kv_.data(), n);
  bool first[2] = {true, true};
  std::vector<Pair> pairs;
  for (int j = 0; j < cp_.size; ++j) {
    pairs_with(j, pairs);
    for (const Pair& p : pairs) {
      chunk_forward(run, atty, lse, qkv, all_.data() + j * n, p, first[p.q_chunk]);
      first[p.q_chunk] = false;
    }
  }
}

template <typename S>
void CpAttention<S>::gather_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* lse,
                                     const S* qkv) {
  const int64_t n = rows() * 2 * kvw();
  run({Op::kCopy, "kv.copy", 0, 0, 0, 0.0}, [&] {
    be_.zero(dqkv, sizeof(S) * static_cast<size_t>(rows() * qkvw()));
    be_.zero(dall_.data(), dall_.bytes());
    be_.copy_2d(kv_.data(), 2 * kvw(), qkv + NH_ * hs_, qkvw(), rows(), 2 * kvw());
  });
  cp.all_gather(all_.data(), kv_.data(), n);  // gathered again rather than kept
  std::vector<Pair> pairs;
  for (int j = 0; j < cp_.size; ++j) {
    pairs_with(j, pairs);
    for (const Pair& p : pairs) chunk_backward(run, dqkv, dall_.data() + j * n, datty, D_.data(), lse, qkv, all_.data() + j * n, p);
  }
  cp.reduce_scatter(dkv_.data(), dall_.data(), n);
  run({Op::kCopy, "dkv.add", 0, 0, 0, 0.0}, [&] { be_.add_2d(dqkv + NH_ * hs_, qkvw(), dkv_.data(), 2 * kvw(), rows(), 2 * kvw()); });
}

template <typename S>
void CpAttention<S>::blocks_to_sequence(S* seq, const S* blocks, int width) {
  for (int i = 0; i < cp_.size; ++i) {
    const CpChunks c = cp_chunks(T_, cp_, i);
    for (int k = 0; k < c.count; ++k)
      for (int b = 0; b < B_; ++b)
        be_.copy(seq + (int64_t{b} * T_ + c.start[k]) * width,
                 blocks + (i * rows() + (int64_t{k} * B_ + b) * c.len) * width, int64_t{c.len} * width);
  }
}

template <typename S>
void CpAttention<S>::sequence_to_blocks(S* blocks, const S* seq, int width) {
  for (int i = 0; i < cp_.size; ++i) {
    const CpChunks c = cp_chunks(T_, cp_, i);
    for (int k = 0; k < c.count; ++k)
      for (int b = 0; b < B_; ++b)
        be_.copy(blocks + (i * rows() + (int64_t{k} * B_ + b) * c.len) * width,
                 seq + (int64_t{b} * T_ + c.start[k]) * width, int64_t{c.len} * width);
  }
}

template <typename S>
void CpAttention<S>::ulysses_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* act, const S* qkv) {
  const int C = cp_.size, NHu = NH_ / C, KVHu = KVH_ / C, hs = hs_, QKV = qkvw(), Cw = NH_ * hs;
  const int wu = (NHu + 2 * KVHu) * hs, cu = NHu * hs;
  const int64_t full = int64_t{B_} * T_, R = rows();
  S* qkv_seq = act;                              // (B, T, wu): head group of this rank, whole sequence
  S* att = qkv_seq + full * wu;                  // (B, NHu, T, T), flash: (B, NHu, T)
  S* y_seq = att + ulysses_att();                // (B, T, cu)
  run({Op::kCopy, "heads.pack", 0, 0, 0, 0.0}, [&] {  // to rank j: my rows of its heads, [q | k | v]
    for (int j = 0; j < C; ++j) {
      S* d = send_.data() + j * R * wu;
      be_.copy_2d(d, wu, qkv + j * NHu * hs, QKV, R, NHu * hs);
      be_.copy_2d(d + NHu * hs, wu, qkv + (NH_ + j * KVHu) * hs, QKV, R, KVHu * hs);
      be_.copy_2d(d + (NHu + KVHu) * hs, wu, qkv + (NH_ + KVH_ + j * KVHu) * hs, QKV, R, KVHu * hs);
    }
  });
  cp.all_to_all(recv_.data(), send_.data(), R * wu);
  run({Op::kCopy, "layout", 0, 0, 0, 0.0}, [&] { blocks_to_sequence(qkv_seq, recv_.data(), wu); });
  run({Op::kAttention, "fwd", 0, 0, 0, 4.0 * static_cast<double>(attention_block_macs(T_, hs)) * B_ * NHu},
      [&] {
        if (flash_) be_.flash_attention_forward(y_seq, att, qkv_seq, B_, T_, NHu, KVHu, hs);
        else be_.attention_forward(y_seq, att, qkv_seq, B_, T_, NHu, KVHu, hs);
      });
  run({Op::kCopy, "layout", 0, 0, 0, 0.0}, [&] { sequence_to_blocks(send_.data(), y_seq, cu); });
  cp.all_to_all(recv_.data(), send_.data(), R * cu);
  run({Op::kCopy, "heads.unpack", 0, 0, 0, 0.0}, [&] {
    for (int j = 0; j < C; ++j) be_.copy_2d(atty + j * cu, Cw, recv_.data() + j * R * cu, cu, R, cu);
  });
}

template <typename S>
void CpAttention<S>::ulysses_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* act) {
  const int C = cp_.size, NHu = NH_ / C, KVHu = KVH_ / C, hs = hs_, QKV = qkvw(), Cw = NH_ * hs;
  const int wu = (NHu + 2 * KVHu) * hs, cu = NHu * hs;
  const int64_t full = int64_t{B_} * T_, R = rows();
  const S* qkv_seq = act;
  const S* att = qkv_seq + full * wu;
  const S* y_seq = att + ulysses_att();
  S* dy_seq = dall_.data();
  S* dqkv_seq = all_.data();
  run({Op::kCopy, "heads.pack", 0, 0, 0, 0.0}, [&] {
    for (int j = 0; j < C; ++j) be_.copy_2d(send_.data() + j * R * cu, cu, datty + j * cu, Cw, R, cu);
  });
  cp.all_to_all(recv_.data(), send_.data(), R * cu);
  run({Op::kCopy, "layout", 0, 0, 0, 0.0}, [&] { blocks_to_sequence(dy_seq, recv_.data(), cu); });
  run({Op::kAttention, "bwd", 0, 0, 0, 8.0 * static_cast<double>(attention_block_macs(T_, hs)) * B_ * NHu},
      [&] {
        if (flash_) be_.flash_attention_backward(dqkv_seq, dy_seq, qkv_seq, y_seq, att, B_, T_, NHu, KVHu, hs);
        else be_.attention_backward(dqkv_seq, dkv_.data(), dy_seq, qkv_seq, att, B_, T_, NHu, KVHu, hs);
      });
  run({Op::kCopy, "layout", 0, 0, 0, 0.0}, [&] { sequence_to_blocks(send_.data(), dqkv_seq, wu); });
  cp.all_to_all(recv_.data(), send_.data(), R * wu);
  run({Op::kCopy, "heads.unpack", 0, 0, 0, 0.0}, [&] {
    for (int j = 0; j < C; ++j) {
      const S* s = recv_.data() + j * R * wu;
      be_.copy_2d(dqkv + j * NHu * hs, QKV, s, wu, R, NHu * hs);
      be_.copy_2d(dqkv + (NH_ + j * KVHu) * hs, QKV, s + NHu * hs, wu, R, KVHu * hs);
      be_.copy_2d(dqkv + (NH_ + KVH_ + j * KVHu) * hs, QKV, s + (NHu + KVHu) * hs, wu, R, KVHu * hs);
    }
  });
}

template <typename S>
void CpAttention<S>::forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* act, const S* qkv) {
  switch (cp_.algo) {
    case CpAlgo::kRing: ring_forward(cp, run, atty, act, qkv); break;
    case CpAlgo::kAllGather: gather_forward(cp, run, atty, act, qkv); break;
    case CpAlgo::kUlysses: ulysses_forward(cp, run, atty, act, qkv); break;
  }
}

template <typename S>
void CpAttention<S>::backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* atty,
                              const S* act, const S* qkv) {
  if (cp_.algo == CpAlgo::kUlysses) {
    ulysses_backward(cp, run, dqkv, datty, act);
    return;
  }
  rowdots(run, datty, atty);
  if (cp_.algo == CpAlgo::kRing)
    ring_backward(cp, run, dqkv, datty, act, qkv);
  else
    gather_backward(cp, run, dqkv, datty, act, qkv);
}

template class CpAttention<float>;
template class CpAttention<double>;

}  // namespace meshbench::parallel
