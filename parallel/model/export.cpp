#include "model/export.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace meshbench::parallel {

ExportedStep run_export_step(Gpt<float>& model, const int32_t* tokens, const int32_t* targets,
                             const AdamWConfig& adam) {
  const GptConfig& c = model.config();
  const size_t N = static_cast<size_t>(c.tokens());
  ExportedStep s;
  s.tokens.assign(tokens, tokens + N);
  s.targets.assign(targets, targets + N);
  // Through the backend: on --device cuda the parameters and gradients live on the GPU (the
  // logits are downloaded by forward itself).
  s.params_before = model.download_params();
  s.logits.resize(N * static_cast<size_t>(c.vocab));
  model.zero_grad();
  s.loss = model.forward(tokens, targets, s.logits.data());
  model.backward();
  s.grads = model.download_grads();
  model.update(adam, 1);
  s.params_after = model.download_params();
  return s;
}

namespace {
template <typename V>
void write_bin(const std::filesystem::path& p, const V& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(typename V::value_type)));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}
}  // namespace

void write_export(const std::string& dir, const Gpt<float>& model, const ExportedStep& s,
                  const AdamWConfig& adam) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const GptConfig& c = model.config();
  nlohmann::ordered_json j;
  j["config"] = {{"layers", c.layers},     {"hidden", c.hidden}, {"heads", c.heads},
                 {"kv_heads", c.kv_heads}, {"ffn", c.ffn},       {"seq", c.seq},
                 {"max_seq", c.max_seq},   {"vocab", c.vocab},   {"micro_batch", c.micro_batch},
                 {"tied", c.tied},         {"experts", c.experts}, {"top_k", c.top_k},
                 {"moe_every", c.moe_every}, {"capacity_factor", c.capacity_factor},
                 {"aux_loss_coef", c.aux_loss_coef}};
  j["adamw"] = {{"lr", adam.lr},
                {"beta1", adam.beta1},
                {"beta2", adam.beta2},
                {"eps", adam.eps},
                {"weight_decay", adam.weight_decay}};
  j["loss"] = s.loss;
  j["total"] = model.layout().total();
  auto& layout = j["layout"] = nlohmann::ordered_json::array();
  for (const auto& e : model.layout().entries())
    layout.push_back({{"name", e.name},
                      {"shape", e.shape},
                      {"offset", e.offset},
                      {"numel", e.numel},
                      {"weight_decay", e.weight_decay}});
  std::ofstream(fs::path(dir) / "config.json") << j.dump(1) << "\n";
  write_bin(fs::path(dir) / "tokens.i32", s.tokens);
  write_bin(fs::path(dir) / "targets.i32", s.targets);
  write_bin(fs::path(dir) / "params_before.f32", s.params_before);
  write_bin(fs::path(dir) / "logits.f32", s.logits);
  write_bin(fs::path(dir) / "grads.f32", s.grads);
  write_bin(fs::path(dir) / "params_after.f32", s.params_after);
}

}  // namespace meshbench::parallel
