// Context-parallel attention (Megatron/Transformer Engine's ring attention, Llama 3's
// all-gather of K and V, DeepSpeed Ulysses): the sequence is split over the CP group and
// each rank's attention still sees every earlier token. The rest of the model is row-wise,
// so a rank simply holds fewer rows: its chunks of the sequence, in chunk-major order
// (chunk, sample, position). Zig-zag gives rank r chunks r and 2C-1-r of 2C equal chunks, so
// every rank does the same causal work; contiguous gives it chunk r of C.
//   ring:      K and V blocks circulate C-1 steps; each step's transfer is posted before the
//              attention on the block already held; partial results merge by log-sum-exp
//              (attention_chunk_forward). Backward: K, V circulate again, and each block's
//              dK, dV travel with it back to their owner (C-1 K/V sends, C dK/dV sends).
//   allgather: K and V all-gathered before the attention, gathered again in the backward,
//              and their gradients reduce-scattered to their owners.
//   ulysses:   an all-to-all turns sequence shards into head shards (q, k, v of NH/C heads for
//              the whole sequence), the one-rank causal attention runs, and another
//              all-to-all turns the output back; the backward mirrors both.
// Chunk pairs whose keys all follow the queries are skipped; the pairs run are timed with
// their executed FLOPs (4 products forward, 5 backward, of Tq x Tk x hs multiply-adds).
// Not here: the communicator (kernels/comm_group.hpp), the rest of the block (model.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"
#include "common/group_comm.hpp"
#include "common/modes.hpp"
#include "common/op.hpp"

namespace meshbench::parallel {


struct CpSpec {
  int size = 1, rank = 0;
  CpAlgo algo = CpAlgo::kRing;
  bool zigzag = true;   // --cp-split zigzag (else contiguous)
  bool overlap = true;  // ring: post each transfer before the attention on the held block
};

// The chunks of the sequence (length T) rank `rank` holds: count (2 zig-zag, 1 contiguous)
// chunks of len positions, starting at start[k].
struct CpChunks {
  int count = 1, len = 0;
  int start[2] = {0, 0};
};
CpChunks cp_chunks(int T, const CpSpec& cp, int rank);
// Whether query chunk a of `mine` sees anything of key chunk k of `theirs` under the causal
// mask: its last query position is at or after the key chunk's first (ring and all-gather
// compute only such pairs).
inline bool cp_pair_sees(const CpChunks& mine, int a, const CpChunks& theirs, int k) {
  return theirs.start[k] <= mine.start[a] + mine.len - 1;
}

// Local row i of a sample-major (B, T) array: the rows of this rank in chunk-major order.
// Fills `rows` with the flat (b x T + position) index of each local row.
void cp_local_rows(std::vector<int>& rows, int B, int T, const CpSpec& cp);

template <typename S>
class CpAttention {
 public:
  // B samples of T positions; NH, KVH, hs: this rank's heads (after tensor parallel). flash
  // (--attention flash): Ulysses attends its head group with the flash kernels (a log-sum-exp
  // per row and head instead of the T x T probabilities); ring and all-gather merge chunks by
  // log-sum-exp either way.
  CpAttention(int B, int T, int NH, int KVH, int hs, const CpSpec& cp, Backend<S>& be, MemoryTracker* mem,
              bool flash = false);
  // Elements of one layer's saved state (ring/allgather: lse; ulysses: the gathered q, k, v,
  // probabilities (flash: their row log-sum-exp) and output), allocated by the model among its
  // activations.
  int64_t acts_per_layer() const;
  // atty (rows, NH hs) from qkv (rows, QKV) of this rank's rows; act: this layer's state.
  void forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* act, const S* qkv);
  // dqkv (rows, QKV) written, from datty and the forward's atty, act, qkv.
  void backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* atty, const S* act,
                const S* qkv);

 private:
  struct Pair {  // a (query chunk, key chunk) pair that sees something
    int q_chunk, k_rank, k_chunk;
  };
  int64_t rows() const { return int64_t{B_} * T_ / cp_.size; }
  int kvw() const { return KVH_ * hs_; }
  int qkvw() const { return (NH_ + 2 * KVH_) * hs_; }
  double pair_flops(bool backward) const;
  // Ring / all-gather: the pairs of query chunk a against key rank j's chunks.
  void pairs_with(int j, std::vector<Pair>& out) const;
  void chunk_forward(const ComputeOp& run, S* atty, S* lse, const S* qkv, const S* kv, const Pair& p, bool first);
  void chunk_backward(const ComputeOp& run, S* dqkv, S* dkv, const S* datty, const S* D, const S* lse,
                      const S* qkv, const S* kv, const Pair& p);
  void ring_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* lse, const S* qkv);
  void ring_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* lse, const S* qkv);
  void gather_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* lse, const S* qkv);
  void gather_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* lse, const S* qkv);
  void ulysses_forward(GroupComm<S>& cp, const ComputeOp& run, S* atty, S* act, const S* qkv);
  void ulysses_backward(GroupComm<S>& cp, const ComputeOp& run, S* dqkv, const S* datty, const S* act);
  // Ulysses: rows of rank i's chunks (rank-major blocks) <-> the sample-major full sequence.
  void blocks_to_sequence(S* seq, const S* blocks, int width);
  void sequence_to_blocks(S* blocks, const S* seq, int width);
  void rowdots(const ComputeOp& run, const S* datty, const S* atty);

  int B_, T_, NH_, KVH_, hs_;
  CpSpec cp_;
  bool flash_ = false;
  // Ulysses: elements of the head group's attention state, probabilities or log-sum-exp
  int64_t ulysses_att() const {
    const int64_t NHu = NH_ / cp_.size;
    return flash_ ? int64_t{B_} * NHu * T_ : int64_t{B_} * NHu * T_ * T_;
  }
  Backend<S>& be_;
  CpChunks mine_;
  BackendArray<S, S> kv_, kv2_, dkv_, dkv2_, all_, dall_, D_, send_, recv_;
};

}  // namespace meshbench::parallel
