#include "core/eval/embed.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>

#include "core/model/checkpoint.hpp"
#include "core/project/subspace.hpp"
#include "core/util/error.hpp"
#include "core/util/progress.hpp"
#include "core/util/system.hpp"

namespace dpft::eval {

Embedder load_embedder(const std::string& path, const std::string& device,
                       const std::string& what) {
  DPFT_CHECK_AS(ConfigError, device == "cpu" || cuda_available(),
                "{}: --device {}: this dpft's LibTorch has no CUDA or sees no GPU", what, device);
  model::CausalLM m = model::load_checkpoint(path);
  model::Encoder enc = model::as_encoder(m);
  DPFT_CHECK_AS(ConfigError, enc != nullptr,
                "{}: {} holds a {} model, not an encoder; sentence embeddings need a bert or "
                "roberta checkpoint",
                what, path, m->config().model_type);
  enc->to(torch::Device(device));
  return Embedder{enc, tok::EncoderTokenizer::load(path), path};
}

Embedder load_embedder_matching(const nlohmann::json& identity, const std::string& path,
                                const std::string& device, const std::string& what,
                                const std::string& hint) {
  std::string use = path;
  if (use.empty()) {
    const std::string given = identity.value("path", std::string()),
                      abs = identity.value("abs_path", std::string());
    use = !given.empty() && std::filesystem::exists(given) ? given
          : !abs.empty() && std::filesystem::exists(abs)   ? abs
                                                           : "";
    DPFT_CHECK_AS(InputError, !use.empty(),
                  "{}: the encoder it was built with is not at '{}'{} (from {}); {}", what, given,
                  abs.empty() || abs == given ? "" : " nor at '" + abs + "'",
                  std::filesystem::current_path().string(), hint);
  }
  Embedder em = load_embedder(use, device, what);
  const std::string want = identity.value("params_sha256", std::string()),
                    got = em.identity(0).value("params_sha256", std::string());
  DPFT_CHECK_AS(InputError, want == got,
                "{}: the encoder at {} is not the one it was built with (weights sha256 {} vs "
                "{}); {}",
                what, use, got.substr(0, 12), want.substr(0, 12), hint);
  return em;
}

nlohmann::json Embedder::identity(size_t max_length) const {
  const auto& cfg = model->config();
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
  return {{"path", path},
          {"model_type", cfg.model_type},
          {"hidden_size", cfg.hidden_size},
          {"params_sha256", project::params_sha256(params)},
          {"max_length", max_length},
          {"pooling", "mean over real tokens, L2-normalised"}};
}

torch::Tensor embed_texts(model::EncoderImpl& model, const tok::EncoderTokenizer& tok,
                          const std::vector<std::string>& texts, const EmbedOptions& opts) {
  DPFT_CHECK_AS(ConfigError, opts.batch >= 1, "embed: batch must be >= 1, got {}", opts.batch);
  const auto& cfg = model.config();
  const size_t limit = static_cast<size_t>(cfg.usable_positions());
  const size_t max_len = opts.max_length == 0 ? limit : std::min(opts.max_length, limit);
  const int64_t n = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int64_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    ids[i] = tok.encode(texts[i], std::nullopt, max_len).ids;
  // Longest first, so that each batch pads to about its own length.
  std::vector<int64_t> order(texts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ids[static_cast<size_t>(a)].size() > ids[static_cast<size_t>(b)].size();
  });
  torch::NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  const torch::Device dev = model.parameters().front().device();
  const int64_t pad = tok.pad_id();
  torch::Tensor out = torch::empty({n, cfg.hidden_size}, torch::kFloat32);
  for (int64_t s = 0; s < n; s += opts.batch) {
    const int64_t e = std::min(n, s + opts.batch), B = e - s;
    const int64_t T =
        static_cast<int64_t>(ids[static_cast<size_t>(order[static_cast<size_t>(s)])].size());
    torch::Tensor I = torch::full({B, T}, pad, torch::kInt64),
                  M = torch::zeros({B, T}, torch::kInt64);
    auto ia = I.accessor<int64_t, 2>();
    auto ma = M.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
      const auto& row = ids[static_cast<size_t>(order[static_cast<size_t>(s + b)])];
      for (size_t t = 0; t < row.size(); ++t) {
        ia[b][static_cast<int64_t>(t)] = row[t];
        ma[b][static_cast<int64_t>(t)] = 1;
      }
    }
    I = I.to(dev);
    M = M.to(dev);
    torch::Tensor emb = model::mean_pool_normalize(model.encode(I, M, torch::Tensor()), M).cpu();
    torch::Tensor idx = torch::tensor(std::vector<int64_t>(order.begin() + s, order.begin() + e));
    out.index_copy_(0, idx, emb);
    if (opts.on_batch) opts.on_batch(e, n);
  }
  if (was_training) model.train();
  return out;
}

torch::Tensor embed_with_progress(Embedder& em, const std::vector<std::string>& texts,
                                  int64_t batch, size_t max_length, const std::string& label,
                                  double* seconds) {
  Progress bar(label, static_cast<long>(texts.size()));
  EmbedOptions eo;
  eo.batch = batch;
  eo.max_length = max_length;
  eo.on_batch = [&](int64_t done, int64_t) { bar.update(static_cast<long>(done)); };
  const auto t0 = std::chrono::steady_clock::now();
  torch::Tensor e = embed_texts(*em.model, em.tok, texts, eo);
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bar.finish();
  return e;
}

}  // namespace dpft::eval
