// Gpt<S>::timed, the runner every op of the model goes through (profile, trace, the backward's
// poll), for the files that define Gpt's members: model.cpp and model_block.cpp.
#pragma once

#include <utility>

#include "core/timer.hpp"
#include "model/model.hpp"

namespace meshbench::parallel {

template <typename S>
template <typename F>
void Gpt<S>::timed(Op op, F&& f, double flops) {
  timed(OpInfo{op, "", 0, 0, 0, flops}, "", std::forward<F>(f));
}

template <typename S>
template <typename F>
void Gpt<S>::timed(const OpInfo& info, const char* role, F&& f) {
  if (!profiling_ && trace_ == nullptr) {
    f();
  } else {
    // A device backend queues ops: profiling waits for each so its time is its own.
    const bool sync = profiling_ && be_->mem() == compute::MemKind::kDevice;
    if (sync) be_->synchronize();
    // A traced op on a device: events on the stream that runs it (issue 44, item 6).
    const bool marks = trace_ != nullptr && clock_ != nullptr && !sync && be_->stream() != nullptr;
    const int m0 = marks ? clock_->mark(be_->stream()) : -1;
    const double t0 = core::now_seconds();
    f();
    if (sync) be_->synchronize();
    const double t1 = core::now_seconds();
    const int m1 = marks ? clock_->mark(be_->stream()) : -1;
    if (profiling_) op_s_[static_cast<int>(info.op)] += t1 - t0;
    if (trace_ != nullptr)
      trace_->push_back({trace_step_, trace_micro_, trace_layer_, info.op, trace_phase_, info.flops, t0, t1, 0, role,
                         info.part, info.m, info.n, info.k, m0, m1});
  }
  if (hooks_.poll) hooks_.poll();
}

}  // namespace meshbench::parallel
