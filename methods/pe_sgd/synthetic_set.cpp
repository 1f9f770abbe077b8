// Synthetic sets of the PE-SGD paper's methods (methods/pe_sgd/synthetic_set.hpp).
#include "methods/pe_sgd/synthetic_set.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/config/fields.hpp"
#include "core/model/checkpoint.hpp"
#include "core/tokenizer/load.hpp"
#include "core/train/optimizer.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "core/util/strings.hpp"
#include "data/lm_dataset.hpp"

namespace dpft::pe_sgd {

namespace fs = std::filesystem;
using torch::Tensor;

nlohmann::json gen_stats_json(const synth::GenerationStats& s) {
  return {{"samples", s.samples},
          {"tokens", s.tokens},
          {"seconds", s.seconds},
          {"tokens_per_s", s.seconds > 0 ? s.tokens / s.seconds : 0.0}};
}

void SyntheticOptions::configure(Fields& f, bool evolution) {
  f.get("synthetic_size", size, Range::at_least(1));  // N
  // L (inf: regenerate D from RANDOM_API only)
  double L = fold == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(fold);
  if (f.get("variation_fold", L, Range::closed(1, std::numeric_limits<double>::infinity()))) {
    DPFT_CHECK_AS(ConfigError, std::isinf(L) || L == std::floor(L),
                  "{}: must be a whole number >= 1 or inf, got {}", f.key_path("variation_fold"),
                  L);
    fold = std::isinf(L) ? 0 : static_cast<int64_t>(L);
  }
  if (evolution) f.get("evolve", evolve);
  f.get("prompts", prompts);
  f.get_enum("style", style, synth::kPromptStyleNames);
  f.get("generator_model", generator_model);
  Fields g = f.child("generation");
  g.get("max_new_tokens", max_new_tokens, Range::at_least(1));
  g.get("min_new_tokens", min_new_tokens, Range::at_least(0));
  DPFT_CHECK_AS(ConfigError, min_new_tokens <= max_new_tokens, "{}: must be <= max_new_tokens ({})",
                g.key_path("min_new_tokens"), max_new_tokens);
  g.get("temperature", temperature, Range::above(0));
  g.get("top_p", top_p, Range{0, 1, true, false});
  g.get("top_k", top_k, Range::at_least(0));
  g.get("repetition_penalty", repetition_penalty, Range::at_least(1));
  g.get("batch_size", gen_batch_size, Range::at_least(1));
  g.finish();
  f.get("sft_epochs", sft_epochs, Range::at_least(0));
  f.get("sft_lr", sft_lr, Range::at_least(0));
  f.get("sft_batch_size", sft_batch_size, Range::at_least(1));
  f.get("save_synthetic", save_synthetic);
  f.get("diagnostics", diagnostics);
  f.get("diagnostics_k", diagnostics_k, Range::at_least(1));
  f.get_enum("grad_mode", grad.mode, grad::kGradModeNames);
  f.get("max_materialize_mb", grad.max_materialize_mb, Range::above(0));
  DPFT_CHECK_AS(ConfigError, !prompts.empty(),
                "{}: a prompt file is required (shipped: experiments/prompts/pubmed.yaml, "
                "biorxiv.yaml, congressional.yaml)",
                f.key_path("prompts"));
}

synth::GeneratorOptions generator_options(const Spec& spec, const SyntheticOptions& so) {
  synth::GeneratorOptions go;
  go.style = synth::resolve_style(so.style, spec.data.chat_format != ChatFormatChoice::kNone);
  // The trained model is prompted in the chat format its private data are rendered in; a frozen
  // generator in its own tokenizer's.
  if (so.generator_model.empty()) go.chat_format = data::fixed_chat_format(spec.data.chat_format);
  go.gen.do_sample = true;
  go.gen.max_new_tokens = so.max_new_tokens;
  go.gen.min_new_tokens = so.min_new_tokens;
  go.gen.temperature = so.temperature;
  go.gen.top_p = so.top_p;
  go.gen.top_k = so.top_k;
  go.gen.repetition_penalty = so.repetition_penalty;
  go.batch_size = so.gen_batch_size;
  return go;
}

// The generator: the model being trained (Alg. 1) or a frozen one from generator_model (Alg. 2).
std::unique_ptr<Generator> make_generator(const Spec& spec, train::TrainInputs& in,
                                          const SyntheticOptions& so) {
  auto b = std::make_unique<Generator>();
  synth::PromptSet prompts = synth::load_prompts(so.prompts);
  b->model = in.model;
  const tok::Tokenizer* tk = in.tok.get();
  if (!so.generator_model.empty()) {
    b->model = model::load_checkpoint(so.generator_model);
    for (auto& p : b->model->parameters()) p.set_requires_grad(false);
    b->own_tok = std::make_unique<tok::Tokenizer>(tok::load_tokenizer(so.generator_model));
    tk = b->own_tok.get();
    spdlog::info("synthetic data from the frozen generator {} (Algorithm 2)", so.generator_model);
  }
  synth::GeneratorOptions go = generator_options(spec, so);
  b->style = go.style;
  b->gen = std::make_unique<synth::SyntheticGenerator>(b->model, *tk, prompts, go);
  return b;
}

lm::LmDataset synthetic_dataset(const std::vector<std::string>& texts, const std::string& prompt,
                                const Spec& spec, const tok::Tokenizer& tok) {
  std::vector<lm::Example> ex;
  for (size_t i = 0; i < texts.size(); ++i) {
    lm::Example e;
    e.index = static_cast<int64_t>(i);
    e.text = texts[i];
    if (!spec.data.train.prompt.empty())
      e.prompt = spec.data.train.prompt;  // the private rows' fixed prompt
    else if (!spec.data.train.prompt_column.empty())
      e.prompt = prompt;
    ex.push_back(std::move(e));
  }
  return data::build_lm_dataset(ex, tok, data::lm_data_options(spec.data));
}

void save_synthetic_csv(RunDir& dir, const std::vector<std::string>& texts, int64_t iter) {
  std::string csv = "text\n";
  for (const auto& s : texts) csv += csv_quote(s) + "\n";
  fs::create_directories(dir.file("synthetic"));
  write_file_atomic(dir.file(fmt::format("synthetic/iter_{:04d}.csv", iter)), csv);
}

uint64_t generation_seed(const Spec& spec, int64_t step) {
  return derive_seed(static_cast<uint64_t>(spec.seed), "synth") +
         1000003ULL * static_cast<uint64_t>(step);
}

// Non-private SFT of the trainable parameters on D (Alg. 1 line 2): epochs of shuffled
// mini-batches, mean per-sample loss, the run's optimizer kind at a constant lr.
void synthetic_sft_epochs(model::CausalLM& m, const lm::LmDataset& ds, const SyntheticOptions& so,
                          const Spec& spec, int64_t pad_id) {
  std::vector<Tensor> params;
  for (auto& [name, t] : model::trainable_parameters(m)) params.push_back(t);
  train::OptimizerOptions oo;
  oo.kind = spec.train.optimizer;
  oo.weight_decay = spec.train.weight_decay;
  oo.momentum = spec.train.momentum;
  train::Optimizer opt(params, oo);
  const double lr = so.sft_lr > 0 ? so.sft_lr : spec.train.lr;
  std::mt19937_64 rng(derive_seed(static_cast<uint64_t>(spec.seed), "sft"));
  m->train();
  for (int64_t e = 0; e < so.sft_epochs; ++e) {
    std::vector<int64_t> perm(static_cast<size_t>(ds.size()));
    for (int64_t i = 0; i < ds.size(); ++i) perm[static_cast<size_t>(i)] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    double total = 0;
    for (size_t b = 0; b < perm.size(); b += static_cast<size_t>(so.sft_batch_size)) {
      std::vector<int64_t> rows(perm.begin() + b,
                                perm.begin() + std::min(perm.size(), b + so.sft_batch_size));
      for (auto& p : params) p.mutable_grad() = Tensor();
      lm::LmBatch batch = lm::collate(ds, rows, pad_id);
      const torch::Device dev = params.front().device();
      Tensor loss = model::next_token_scores(*m, batch.input_ids.to(dev),
                                             batch.attention_mask.to(dev), batch.labels.to(dev))
                        .loss.mean();
      loss.backward();
      total += loss.item<double>() * static_cast<double>(rows.size());
      std::vector<Tensor> grads;
      for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
      opt.step(grads, lr);
    }
    for (auto& p : params) p.mutable_grad() = Tensor();
    spdlog::info("synthetic SFT epoch {}/{}: mean loss {:.4f} over {} samples", e + 1,
                 so.sft_epochs, total / std::max<int64_t>(1, ds.size()), ds.size());
  }
}

nlohmann::json synthetic_sft(RunContext& ctx, train::TrainInputs& in, const SyntheticOptions& so) {
  auto gb = make_generator(ctx.spec, in, so);
  auto t0 = steady_now();
  std::vector<std::string> texts =
      synth::syn_data_generation(*gb->gen, {}, so.size, so.fold, generation_seed(ctx.spec, 0));
  double gen_s = seconds_since(t0);
  lm::LmDataset D = synthetic_dataset(texts, gb->gen->prompts().zero_shot, ctx.spec, *in.tok);
  DPFT_CHECK_AS(RuntimeError, D.size() > 0,
                "every synthetic sample was empty; check method.prompts");
  if (so.save_synthetic) save_synthetic_csv(ctx.dir, texts, 1);
  if (so.sft_epochs > 0) synthetic_sft_epochs(in.model, D, so, ctx.spec, in.pad_id);
  return {{"size", D.size()},
          {"variation_fold", so.fold == 0 ? nlohmann::json("inf") : nlohmann::json(so.fold)},
          {"generator", so.generator_model.empty() ? "trained model" : so.generator_model},
          {"style", synth::name_of(gb->style)},
          {"generation_s", gen_s},
          {"sft_epochs", so.sft_epochs},
          {"random_api", gen_stats_json(gb->gen->random_stats)},
          {"variational_api", gen_stats_json(gb->gen->variational_stats)}};
}

}  // namespace dpft::pe_sgd
