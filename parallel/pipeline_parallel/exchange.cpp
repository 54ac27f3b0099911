#include "pipeline_parallel/exchange.hpp"

#include <stdexcept>

namespace meshbench::parallel {

namespace {
template <typename S>
comm::DType dtype_of() {
  return sizeof(S) == 8 ? comm::DType::kDouble : comm::DType::kFloat;
}
}  // namespace

template <typename S>
PipeExchange<S>::PipeExchange(Gpt<S>& model, const PipeEnv& pipe)
    : model_(model), pipe_(pipe), n_(int64_t{model.tp_dims().rows} * model.config().hidden) {
  dout_ = BackendArray<S, S>(model.backend(), n_, &model.memory(), MemCat::kBuffers);
}

template <typename S>
void PipeExchange<S>::recv_activation(const Action& a) {
  S* in = model_.stage_input(a.chunk, a.micro);
  recv(in, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk) - 1, false));
}

template <typename S>
void PipeExchange<S>::send_activation(const Action& a) {
  const S* out = model_.stage_output(a.chunk, a.micro);
  act_sends_[{a.chunk, a.micro}] = send(out, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk), false));
}

template <typename S>
void PipeExchange<S>::recv_gradient(const Action& a) {
  recv(dout_.data(), a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk), true));
}

template <typename S>
void PipeExchange<S>::backward(const Action& a, S scale, bool sync) {
  auto it = act_sends_.find({a.chunk, a.micro});  // its output was delivered: the peer sent this gradient
  if (it != act_sends_.end()) {
    it->second->wait();
    act_sends_.erase(it);
  }
  const int vs = pipe_.virtual_stage(a.chunk);
  const S* dout = vs == pipe_.last_virtual_stage() ? nullptr : dout_.data();
  din_ = vs == 0 ? nullptr : free_buffer();
  model_.backward_chunk(a.chunk, a.micro, scale, dout, din_, sync);
}

template <typename S>
void PipeExchange<S>::send_gradient(const Action& a) {
  if (din_ == nullptr) throw std::logic_error("pipeline schedule: a gradient send without its backward");
  for (auto& g : grad_sends_)
    if (g.buf.data() == din_) g.req = send(din_, a.peer, pipe_.tag(a.micro, pipe_.virtual_stage(a.chunk) - 1, true));
  din_ = nullptr;
}

template <typename S>
void PipeExchange<S>::drain() {
  for (auto& [k, r] : act_sends_) r->wait();
  act_sends_.clear();
  for (auto& g : grad_sends_)
    if (g.req) g.req->wait();
}

template <typename S>
comm::View PipeExchange<S>::view(const S* p) const {
  return comm::View{const_cast<S*>(p), static_cast<size_t>(n_), dtype_of<S>(), model_.backend().mem()};
}

template <typename S>
void PipeExchange<S>::recv(S* p, int from, int tag) {
  pipe_.pp->irecv(view(p), from, tag)->wait();
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

template <typename S>
void reduce_tied_embedding(Gpt<S>& model, const PipeEnv& pipe) {
  for (const auto& e : model.layout().entries())
    if (e.name == "wte") {
      comm::View v{model.grads_at(e.offset), static_cast<size_t>(e.numel), dtype_of<S>(), model.backend().mem()};
      pipe.embedding->order_after(model.backend().stream());
      pipe.embedding->all_reduce(v, v, comm::RedOp::kSum);
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
  // one stage boundary's activation: this rank's token rows (b x s / cp, and / tp under sequence
  // parallel: the stages send their sequence shards) x h
  const uint64_t rows = uint64_t(c.micro_batch) * uint64_t(c.seq / plan.degrees.cp) / uint64_t(plan.sp ? t : 1);
  const uint64_t msg = rows * uint64_t(c.hidden) * sizeof(float);
  const uint64_t wte = uint64_t((c.vocab + t - 1) / t) * uint64_t(c.hidden) * sizeof(float);  // this rank's rows
  return pipeline_analytic(pipe, plan.micro_batches, msg, wte);
}

template class PipeExchange<float>;
template void reduce_tied_embedding<float>(Gpt<float>&, const PipeEnv&);

}  // namespace meshbench::parallel
