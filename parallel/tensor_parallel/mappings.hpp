// Tensor parallel's communication as named operators (Megatron-LM's f and g and the sequence
// parallel pairs), each one collective over the tp group. The linears (linear.hpp) are built
// from these and the GEMMs; nothing else in the strategy talks to the group.
//   f, the column-parallel input:  forward  identity (AR)   | gather the sequence shards (SP)
//                                  backward all-reduce (AR) | reduce-scatter to the shards (SP)
//   g, the row-parallel output:    forward  all-reduce (AR) | reduce-scatter to the shards (SP)
//                                  backward identity (AR)   | gather the gradient's shards (SP)
// "shard": this rank's N / t rows of the [B, T] token order; n_shard its elements.
// post_*: the same call posted non-blocking (a handle for GroupComm::wait), to overlap a GEMM.
#pragma once

#include <cstdint>

#include "common/group_comm.hpp"

namespace meshbench::parallel {

// SP: every rank's shard gathered into the full rows (f forward, g backward, f's re-gather).
template <typename S>
void gather_sequence(GroupComm<S>& tp, S* full, const S* shard, int64_t n_shard) {
  tp.all_gather(full, shard, n_shard);
}
template <typename S>
int post_gather_sequence(GroupComm<S>& tp, S* full, const S* shard, int64_t n_shard) {
  return tp.post_all_gather(full, shard, n_shard);
}

// SP: the full rows summed over the group, this rank keeping its shard (g forward, f backward).
template <typename S>
void reduce_scatter_sequence(GroupComm<S>& tp, S* shard, const S* full, int64_t n_shard) {
  tp.reduce_scatter(shard, full, n_shard);
}
template <typename S>
int post_reduce_scatter_sequence(GroupComm<S>& tp, S* shard, const S* full, int64_t n_shard) {
  return tp.post_reduce_scatter(shard, full, n_shard);
}

// Without SP: the partial sums over the group, in place (g forward, f backward).
template <typename S>
void reduce_over_tp(GroupComm<S>& tp, S* x, int64_t n) {
  tp.all_reduce(x, n);
}
template <typename S>
int post_reduce_over_tp(GroupComm<S>& tp, S* x, int64_t n) {
  return tp.post_all_reduce(x, n);
}

// f forward: the column-parallel GEMM's input. SP gathers the shards into `full`; else x.
template <typename S>
const S* f_forward(GroupComm<S>* tp, bool sp, const S* x, S* full, int64_t n_shard) {
  if (tp == nullptr || !sp) return x;
  gather_sequence(*tp, full, x, n_shard);
  return full;
}

// g backward: the row-parallel GEMM's output gradient. SP gathers its shards into `full`; else dy.
template <typename S>
const S* g_backward(GroupComm<S>* tp, bool sp, const S* dy, S* full, int64_t n_shard) {
  if (tp == nullptr || !sp) return dy;
  gather_sequence(*tp, full, dy, n_shard);
  return full;
}

// g forward: the row-parallel GEMM's partial output `partial` (N rows) summed over the group,
// in place (no SP), or reduce-scattered into `shard` (SP). Returns the reduced rows.
template <typename S>
const S* g_forward(GroupComm<S>& tp, bool sp, S* partial, S* shard, int64_t n_full) {
  if (!sp) {
    reduce_over_tp(tp, partial, n_full);
    return partial;
  }
  reduce_scatter_sequence(tp, shard, partial, n_full / tp.size());
  return shard;
}

}  // namespace meshbench::parallel
