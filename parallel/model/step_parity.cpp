#include "model/step_parity.hpp"

#include <cmath>

#include "model/model.hpp"

namespace meshbench::parallel {

std::vector<ParityRow> step_parity(const GptConfig& cfg, Backend<float>& be, Precision p,
                                   unsigned seed, bool flash) {
  Gpt<float> ref(cfg);
  ref.init_weights(seed);
  const std::vector<float> p0 = ref.download_params();
  GptOptions opts;
  opts.flash = flash;
  Gpt<float> dut(cfg, be, opts);
  dut.upload_params(p0.data());  // the Adam moments start at zero in both
  std::vector<int32_t> tok(size_t(cfg.tokens())), tgt(tok.size());
  synthetic_batch(tok.data(), tgt.data(), DataKind::kRandom, seed, 0, 0, cfg.micro_batch, cfg.seq,
                  cfg.vocab);
  const AdamWConfig adam;
  std::vector<float> lr(size_t(cfg.tokens()) * size_t(cfg.vocab)), ld(lr.size());
  auto step = [&](Gpt<float>& m, std::vector<float>& logits, std::vector<float>& grads,
                  std::vector<float>& params) {
    m.zero_grad();
    const float loss = m.forward(tok.data(), tgt.data(), logits.data());
    m.backward();
    grads = m.download_grads();
    m.update(adam, 1);
    params = m.download_params();
    return loss;
  };
  std::vector<float> gr, pr, gd, pd;
  const float loss_r = step(ref, lr, gr, pr);
  const float loss_d = step(dut, ld, gd, pd);
  // The update rule (parity.hpp): CPU AdamW from p0 with the backend's own gradients.
  const std::vector<float> expect = adamw_first_step(ref.layout(), p0, gd, adam);
  auto tol = [&](const char* op) { return parity_tolerance(op, p); };
  return {{"loss", std::abs(double(loss_d) - loss_r) / std::abs(double(loss_r)), tol("loss")},
          {"logits", rel_error(ld, lr), tol("logits")},
          {"grads", rel_error(gd, gr), tol("grads")},
          {"updated_params", rel_error(pd, expect), tol("updated_params")}};
}

}  // namespace meshbench::parallel
