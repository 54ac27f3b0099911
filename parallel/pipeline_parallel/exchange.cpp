#include "pipeline_parallel/exchange.hpp"

#include <stdexcept>

namespace meshbench::parallel {

template <typename S>
PipeExchange<S>::PipeExchange(Gpt<S>& model, const PipeEnv& pipe)
    : model_(model), pipe_(pipe), n_(int64_t{model.tp_dims().rows} * model.config().hidden) {
  dout_ = BackendArray<S, S>(model.backend(), n_, &model.memory(), MemCat::kBuffers);
}

template <typename S>
typename PipeExchange<S>::Msg PipeExchange<S>::incoming(const Action& a) {
  const int vs = pipe_.virtual_stage(a.chunk);
  if (a.kind == ActionKind::kRecvActivation) return {model_.stage_input(a.chunk, a.micro), pipe_.tag(a.micro, vs - 1, false)};
  return {dout_.data(), pipe_.tag(a.micro, vs, true)};
}

template <typename S>
typename PipeExchange<S>::Msg PipeExchange<S>::outgoing(const Action& a) {
  const int vs = pipe_.virtual_stage(a.chunk);
  if (a.kind == ActionKind::kSendActivation)
    return {const_cast<S*>(model_.stage_output(a.chunk, a.micro)), pipe_.tag(a.micro, vs, false)};
  if (din_ == nullptr) throw std::logic_error("pipeline schedule: a gradient send without its backward");
  return {din_, pipe_.tag(a.micro, vs - 1, true)};
}

template <typename S>
void PipeExchange<S>::keep(const Action& a, std::unique_ptr<comm::Request> req) {
  if (a.kind == ActionKind::kSendActivation) {
    act_sends_[{a.chunk, a.micro}] = std::move(req);
    return;
  }
  for (auto& g : grad_sends_)
    if (g.buf.data() == din_) g.req = std::move(req);
  din_ = nullptr;
}

template <typename S>
void PipeExchange<S>::recv_activation(const Action& a) {
  const Msg m = incoming(a);
  recv(m.p, a.peer, m.tag);
}

template <typename S>
void PipeExchange<S>::send_activation(const Action& a) {
  const Msg m = outgoing(a);
  keep(a, send(m.p, a.peer, m.tag));
}

template <typename S>
void PipeExchange<S>::recv_gradient(const Action& a) {
  const Msg m = incoming(a);
  recv(m.p, a.peer, m.tag);
}

template <typename S>
void PipeExchange<S>::send_then_recv(const Action& s, const Action& r) {
  const Msg out = outgoing(s), in = incoming(r);
  // the send reads what the compute stream wrote; the receive's buffer (a fresh slot zeroed on
  // the compute stream, or dout_ still read by the last backward) is free only after it too
  pipe_.pp->order_after(model_.backend().stream());
  auto [sq, rq] = pipe_.pp->isend_irecv(view(out.p), s.peer, out.tag, view(in.p), r.peer, in.tag);
  keep(s, std::move(sq));
  rq->wait_on(model_.backend().stream());
}

template <typename S>
void PipeExchange<S>::backward(const Action& a, S scale, bool sync) {
  auto it = act_sends_.find({a.chunk, a.micro});  // its output was delivered: the peer sent this gradient
  if (it != act_sends_.end()) {
    it->second->wait_on(model_.backend().stream());
    act_sends_.erase(it);
  }
  const int vs = pipe_.virtual_stage(a.chunk);
  const S* dout = vs == pipe_.last_virtual_stage() ? nullptr : dout_.data();
  din_ = vs == 0 ? nullptr : free_buffer();
  model_.backward_chunk(a.chunk, a.micro, scale, dout, din_, sync);
}

template <typename S>
void PipeExchange<S>::send_gradient(const Action& a) {
  const Msg m = outgoing(a);
  keep(a, send(m.p, a.peer, m.tag));
}

template <typename S>
void PipeExchange<S>::drain() {
  void* compute = model_.backend().stream();  // the compute stream waits, not the host (issue 44, item 10)
  for (auto& [k, r] : act_sends_) r->wait_on(compute);
  act_sends_.clear();
  for (auto& g : grad_sends_)
    if (g.req) g.req->wait_on(compute);
}

template <typename S>
comm::View PipeExchange<S>::view(const S* p) const {
  return comm::View{const_cast<S*>(p), static_cast<size_t>(n_), comm::dtype_of<S>(), model_.backend().mem()};
}

template <typename S>
void PipeExchange<S>::recv(S* p, int from, int tag) {
  // Ordered after the compute stream (issue 30, defect 2): a fresh slot is zero-filled there,
  // and dout_ may still be read by the previous backward's queued work.
  pipe_.pp->order_after(model_.backend().stream());
  pipe_.pp->irecv(view(p), from, tag)->wait_on(model_.backend().stream());
}

template <typename S>
std::unique_ptr<comm::Request> PipeExchange<S>::send(const S* p, int to, int tag) {
  pipe_.pp->order_after(model_.backend().stream());
  return pipe_.pp->isend(view(p), to, tag);
}

template <typename S>
S* PipeExchange<S>::free_buffer() {
  for (auto& g : grad_sends_)
    if (!g.req || g.req->test()) {
      g.req.reset();
      return g.buf.data();
    }
  grad_sends_.push_back({BackendArray<S, S>(model_.backend(), n_, &model_.memory(), MemCat::kBuffers), nullptr});
  return grad_sends_.back().buf.data();
}

void all_reduce_in_order(comm::Communicator& c, comm::View v, void* compute) {
  c.order_after(compute);
  c.all_reduce(v, v, comm::RedOp::kSum);
  c.order_before(compute);
}

template <typename S>
void reduce_tied_embedding(Gpt<S>& model, const PipeEnv& pipe) {
  for (const auto& e : model.layout().entries())
    if (e.name == "wte") {
      comm::View v{model.grads_at(e.offset), static_cast<size_t>(e.numel), comm::dtype_of<S>(), model.backend().mem()};
      all_reduce_in_order(*pipe.embedding, v, model.backend().stream());
    }
}

std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, int m, uint64_t message_bytes,
                                             uint64_t embedding_bytes) {
  uint64_t out = 0, in = 0;  // messages per micro-batch
  for (int c = 0; c < pipe.chunks; ++c) {
    const int vs = pipe.virtual_stage(c);
    const uint64_t below = vs > 0 ? 1 : 0, above = vs < pipe.last_virtual_stage() ? 1 : 0;
    out += above + below;  // the output activations up, the input gradient down
    in += below + above;   // the input activations, the output gradient
  }
  const uint64_t mm = static_cast<uint64_t>(m);
  std::vector<AnalyticBytes> a{{"pp", "send", out * mm * message_bytes, double(out * mm * message_bytes)},
                               {"pp", "recv", in * mm * message_bytes, 0.0}};
  if (pipe.embedding)  // two ranks: the all-reduce sends 2(n-1)/n S = S
    a.push_back({"embedding", "all_reduce", embedding_bytes, double(embedding_bytes)});
  return a;
}

std::vector<AnalyticBytes> pipeline_analytic(const PipeEnv& pipe, const Plan& plan) {
  const GptConfig& c = plan.model;
  const int t = plan.degrees.tp;
  // one stage boundary's activation: this rank's token rows (tp_dims: b x s / cp, and / tp under
  // sequence parallel, the stages sending their sequence shards) x h, as the exchange sends it
  const TpDims d = tp_dims(c, TpSpec{t, 0, TpMode{plan.sp, plan.sp_regather, plan.overlap}},
                           CpSpec{plan.degrees.cp, 0, plan.cp_algo, plan.cp_zigzag, plan.overlap});
  const uint64_t msg = uint64_t(d.rows) * uint64_t(c.hidden) * sizeof(float);
  const uint64_t wte = uint64_t((c.vocab + t - 1) / t) * uint64_t(c.hidden) * sizeof(float);  // this rank's rows
  return pipeline_analytic(pipe, plan.micro_batches, msg, wte);
}

template class PipeExchange<float>;
template void reduce_tied_embedding<float>(Gpt<float>&, const PipeEnv&);

}  // namespace meshbench::parallel
