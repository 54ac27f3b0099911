// The one walk over a rank's action list (schedule.hpp) that running (executor/), predicting
// (predict/predict.cpp) and replaying (predict/replay.cpp) share: the dispatch on ActionKind,
// the pairing of a send with the receive after it, and each action's phase are written here
// once, and each use supplies a handler.
//
// A handler has, each taking the action(s) and returning whether it completed:
//   forward(a), backward(a), send(a), recv(a), exchange(send, recv), grad_sync(a), optimizer(a)
// and two hooks: begin(a) before an action (or a pair) and end(a, phase) after it completed,
// with the phase it belongs to ("forward", "backward", "grad_sync", "optimizer"; a pair: the
// receive's). A method returns false when its action cannot complete yet (the predictor's
// receive whose send is not posted): the walk stops there and returns the index to resume
// from; the action is handed over again on resumption, so a handler's partial work must be
// repeatable (the predictor's send posts the same time again).
// Not here: what an action does (the handlers), the lists (schedule.hpp, op_list.hpp).
#pragma once
#include <cstddef>
#include <vector>

#include "pipeline_parallel/schedule.hpp"

namespace meshbench::parallel {

inline bool is_send(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kSendGradient; }
inline bool is_recv(ActionKind k) { return k == ActionKind::kRecvActivation || k == ActionKind::kRecvGradient; }

// A send followed by a receive in the list: one exchange (PipeExchange::send_then_recv), its
// span the receive's phase and tags (the send is posted, not waited for).
inline bool pairs(const Action& a, const Action& b) { return is_send(a.kind) && is_recv(b.kind); }

// The phase an action's time belongs to (the time split's and the trace's phase names).
inline const char* action_phase(ActionKind k) {
  switch (k) {
    case ActionKind::kForward:
    case ActionKind::kRecvActivation:
    case ActionKind::kSendActivation: return "forward";
    case ActionKind::kBackward:
    case ActionKind::kRecvGradient:
    case ActionKind::kSendGradient: return "backward";
    case ActionKind::kGradSync: return "grad_sync";
    case ActionKind::kOptimizer: return "optimizer";
  }
  return "forward";
}

// Walks actions[next..] through `h`; returns the index of the first action not completed
// (actions.size() when all did).
template <typename H>
size_t walk_actions(const std::vector<Action>& actions, size_t next, H& h) {
  while (next < actions.size()) {
    const Action& a = actions[next];
    const bool pair = next + 1 < actions.size() && pairs(a, actions[next + 1]);
    const Action& last = pair ? actions[next + 1] : a;
    h.begin(a);
    bool done = true;
    switch (a.kind) {
      case ActionKind::kForward: done = h.forward(a); break;
      case ActionKind::kBackward: done = h.backward(a); break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient: done = pair ? h.exchange(a, last) : h.send(a); break;
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: done = h.recv(a); break;
      case ActionKind::kGradSync: done = h.grad_sync(a); break;
      case ActionKind::kOptimizer: done = h.optimizer(a); break;
    }
    if (!done) return next;
    h.end(last, action_phase(last.kind));
    next += pair ? 2 : 1;
  }
  return next;
}

}  // namespace meshbench::parallel
