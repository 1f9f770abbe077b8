#include "core/project/projection_run.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <random>

#include "core/config/fields.hpp"
#include "core/model/checkpoint.hpp"
#include "core/synth/synthetic.hpp"
#include "core/tokenizer/load.hpp"
#include "core/train/optimizer.hpp"
#include "core/train/trainer.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"

namespace dpft::project {

namespace fs = std::filesystem;
using torch::Tensor;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string csv_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

nlohmann::json gen_stats_json(const synth::GenerationStats& s) {
  return {{"samples", s.samples},
          {"tokens", s.tokens},
          {"seconds", s.seconds},
          {"tokens_per_s", s.seconds > 0 ? s.tokens / s.seconds : 0.0}};
}

// Non-private SFT of the trainable parameters on D (Alg. 1 line 2): epochs of shuffled
// mini-batches, mean per-sample loss, the run's optimizer kind at a constant lr.
void sft(model::CausalLM& m, const data::LmDataset& ds, const SyntheticOptions& so,
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
      data::LmBatch batch = data::collate(ds, rows, pad_id);
      Tensor loss =
          model::per_sample_loss(m->forward(batch.input_ids, batch.attention_mask), batch.labels)
              .first.mean();
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

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

struct GeneratorBundle {
  model::CausalLM model;
  std::unique_ptr<tok::Tokenizer> own_tok;
  std::unique_ptr<synth::SyntheticGenerator> gen;
  std::string style;
};

}  // namespace

synth::GeneratorOptions generator_options(const Spec& spec, const SyntheticOptions& so) {
  synth::GeneratorOptions go;
  go.style = so.style == "auto" ? (spec.data.chat_format == "none" ? "plain" : "chat") : so.style;
  // The trained model is prompted in the chat format its private data are rendered in; a frozen
  // generator in its own tokenizer's.
  const std::string& cf = spec.data.chat_format;
  if (so.generator_model.empty() && cf != "none" && cf != "auto")
    go.chat_format = tok::parse_chat_format(cf);
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

namespace {

// The generator: the model being trained (Alg. 1) or a frozen one from generator_model (Alg. 2).
std::unique_ptr<GeneratorBundle> make_generator(const Spec& spec, train::TrainInputs& in,
                                                const SyntheticOptions& so) {
  auto b = std::make_unique<GeneratorBundle>();
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

void save_synthetic_csv(RunContext& ctx, const std::vector<std::string>& texts, int64_t iter) {
  std::string csv = "text\n";
  for (const auto& s : texts) csv += csv_quote(s) + "\n";
  fs::create_directories(ctx.dir.file("synthetic"));
  write_file_atomic(ctx.dir.file(fmt::format("synthetic/iter_{:04d}.csv", iter)), csv);
}

uint64_t generation_seed(const Spec& spec, int64_t step) {
  return derive_seed(static_cast<uint64_t>(spec.seed), "synth") +
         1000003ULL * static_cast<uint64_t>(step);
}

}  // namespace

void SyntheticOptions::configure(Fields& f, bool evolution) {
  if (evolution) {
    evolve = true;
    fold = 2;
  }
  f.get("synthetic_size", size, Range::at_least(1));
  double L = static_cast<double>(fold);
  if (f.get("variation_fold", L, Range::closed(1, std::numeric_limits<double>::infinity()))) {
    DPFT_CHECK_AS(ConfigError, std::isinf(L) || L == std::floor(L),
                  "{}: must be a whole number >= 1 or inf, got {}", f.key_path("variation_fold"),
                  L);
    fold = std::isinf(L) ? 0 : static_cast<int64_t>(L);
  }
  if (evolution) f.get("evolve", evolve);
  f.get("prompts", prompts);
  f.get_choice("style", style, {"auto", "plain", "chat"});
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
  f.get_choice("grad_mode", grad.mode, {"auto", "materialize", "ghost"});
  f.get("max_materialize_mb", grad.max_materialize_mb, Range::above(0));
  DPFT_CHECK_AS(ConfigError, !prompts.empty(),
                "{}: a prompt file is required (shipped: experiments/prompts/pubmed.yaml, "
                "biorxiv.yaml, congressional.yaml)",
                f.key_path("prompts"));
}

YAML::Node SyntheticOptions::to_yaml(bool evolution) const {
  YAML::Node n;
  n["synthetic_size"] = size;  // N
  if (fold == 0)
    n["variation_fold"] = ".inf";
  else
    n["variation_fold"] = fold;  // L (inf: regenerate D from RANDOM_API only)
  if (evolution) n["evolve"] = evolve;
  n["prompts"] = prompts;
  n["style"] = style;
  n["generator_model"] = generator_model;
  YAML::Node g;
  g["max_new_tokens"] = max_new_tokens;
  g["min_new_tokens"] = min_new_tokens;
  g["temperature"] = temperature;
  g["top_p"] = top_p;
  g["top_k"] = top_k;
  g["repetition_penalty"] = repetition_penalty;
  g["batch_size"] = gen_batch_size;
  n["generation"] = g;
  n["sft_epochs"] = sft_epochs;
  n["sft_lr"] = sft_lr;
  n["sft_batch_size"] = sft_batch_size;
  n["save_synthetic"] = save_synthetic;
  n["diagnostics"] = diagnostics;
  n["diagnostics_k"] = diagnostics_k;
  n["grad_mode"] = grad.mode;
  n["max_materialize_mb"] = grad.max_materialize_mb;
  return n;
}

data::LmDataset synthetic_dataset(const std::vector<std::string>& texts, const std::string& prompt,
                                  const Spec& spec, const tok::Tokenizer& tok) {
  std::vector<data::Example> ex;
  for (size_t i = 0; i < texts.size(); ++i) {
    data::Example e;
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

Tensor gradient_matrix(grad::PerSampleGrads& psg, const data::LmDataset& ds,
                       const std::vector<int64_t>& rows, int64_t micro, int64_t pad_id,
                       Tensor* losses) {
  std::vector<Tensor> parts, ls;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(micro)) {
    std::vector<int64_t> chunk(
        rows.begin() + i, rows.begin() + std::min(rows.size(), i + static_cast<size_t>(micro)));
    data::LmBatch b = data::collate(ds, chunk, pad_id);
    ls.push_back(psg.compute(b.input_ids, b.attention_mask, b.labels));
    parts.push_back(psg.matrix());
  }
  psg.release();
  if (losses) *losses = ls.empty() ? torch::zeros({0}) : torch::cat(ls);
  return parts.empty() ? torch::zeros({0, psg.dim()}) : torch::cat(parts);
}

std::vector<Tensor> unflatten(const Tensor& flat, const std::vector<grad::GradParam>& params) {
  std::vector<Tensor> out;
  int64_t off = 0;
  for (const auto& p : params) {
    int64_t n = p.param.numel();
    out.push_back(flat.narrow(0, off, n).view(p.param.sizes()).clone());
    off += n;
  }
  DPFT_CHECK(off == flat.numel(), "unflatten: {} values for {} parameters", flat.numel(), off);
  return out;
}

nlohmann::json run_projection(RunContext& ctx, const SyntheticOptions& so,
                              const nlohmann::json& method_info,
                              const nlohmann::json& privacy_extra, const ProjectFn& project) {
  const Spec& spec = ctx.spec;
  const uint64_t seed = static_cast<uint64_t>(spec.seed);
  train::TrainInputs in = train::load_train_inputs(spec);
  train::DpSettings dp = train::resolve_dp(spec, in.train.size());
  privacy::NoiseSource noise(derive_seed(seed, "noise"), spec.privacy.secure_noise);
  grad::PerSampleGrads psg(in.model, so.grad);
  spdlog::info("{}: sigma {:.4f} ({}), q {:.5f}, T {}, p {}, N {}, L {}",
               method_info.value("name", ""), dp.sigma, dp.sigma_source, dp.q, dp.steps, psg.dim(),
               so.size, so.fold == 0 ? std::string("inf") : std::to_string(so.fold));

  auto gb = make_generator(spec, in, so);
  synth::SyntheticGenerator& generator = *gb->gen;
  const synth::PromptSet& prompts = generator.prompts();

  // D: its texts and tokenised examples (rows of G). Example index = position in texts.
  std::vector<std::string> texts;
  data::LmDataset D;
  int64_t d_iter = 0;  // the step (1-based) D was made for
  std::optional<Tensor> pending_z;
  int64_t step = 0;  // 0-based index of the next step
  auto set_D = [&](std::vector<std::string> t, int64_t iter, bool write) {
    texts = std::move(t);
    D = synthetic_dataset(texts, prompts.zero_shot, spec, *in.tok);
    d_iter = iter;
    DPFT_CHECK_AS(RuntimeError, D.size() > 0,
                  "every synthetic sample was empty at iteration {}; check method.prompts and "
                  "method.generation",
                  iter);
    if (D.size() < static_cast<int64_t>(texts.size()))
      spdlog::warn("synthetic set: {} of {} samples were empty and dropped",
                   texts.size() - D.size(), texts.size());
    if (write && so.save_synthetic) save_synthetic_csv(ctx, texts, iter);
  };
  auto gen_seed = [&](int64_t t) { return generation_seed(spec, t); };

  // Diagnostics state (analysis only).
  Tensor E_H0;
  std::vector<double> d_nts, d_cos, d_l2, d_std_mean, d_min_max, d_overlap, d_angle;
  double gen_seconds = 0;

  train::LoopOptions lo;
  lo.sampling = "poisson";
  lo.q = dp.q;
  lo.release = dp.release();
  lo.method_info = method_info;
  lo.before_training = [&] {
    auto t0 = std::chrono::steady_clock::now();
    set_D(synth::syn_data_generation(generator, {}, so.size, so.fold, gen_seed(0)), 1, true);
    gen_seconds += seconds_since(t0);
    spdlog::info("synthetic set: {} samples ({:.1f} s)", D.size(), seconds_since(t0));
    if (so.sft_epochs > 0) sft(in.model, D, so, spec, in.pad_id);
  };
  if (so.sft_epochs > 0) lo.eval_after_prepare = "sft";  // the model after SFT on D(0)
  lo.save_state = [&] {
    nlohmann::json z = nullptr;
    if (pending_z) {
      Tensor c = pending_z->contiguous();
      z = std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return nlohmann::json{{"step", step}, {"texts", texts}, {"d_iter", d_iter}, {"pending_z", z}};
  };
  lo.load_state = [&](const nlohmann::json& j) {
    step = j.at("step").get<int64_t>();
    set_D(j.at("texts").get<std::vector<std::string>>(), j.at("d_iter").get<int64_t>(), false);
    if (!j.at("pending_z").is_null())
      pending_z = torch::tensor(j.at("pending_z").get<std::vector<float>>());
    if (so.diagnostics) spdlog::warn("diagnostics: principal angles restart from the resumed step");
  };
  train::Trainer trainer(ctx, in, lo, &noise);
  in.model->train();
  std::vector<int64_t> all_rows;
  std::optional<std::pair<double, double>> noise_std;  // drawn by the projection (metrics)

  auto gradient = [&](const std::vector<int64_t>& rows, train::BatchStats& st) {
    auto t0 = std::chrono::steady_clock::now();
    double gen_s = 0;
    if (pending_z && so.evolve) {  // Alg. 1 line 10 with the model updated by the last step
      const int64_t n_d = D.size();
      const int64_t count =
          so.fold == 0 ? 0 : std::min<int64_t>(n_d, (so.size + so.fold - 1) / so.fold);
      std::vector<std::string> seeds;
      for (int64_t i : sample_selection(*pending_z, count, derive_seed(seed, "select") + step))
        seeds.push_back(texts[static_cast<size_t>(D.items[static_cast<size_t>(i)].index)]);
      set_D(synth::syn_data_generation(generator, seeds, so.size, so.fold, gen_seed(step)),
            step + 1, true);
      gen_s = seconds_since(t0);
      gen_seconds += gen_s;
    }
    all_rows.resize(static_cast<size_t>(D.size()));
    for (int64_t i = 0; i < D.size(); ++i) all_rows[static_cast<size_t>(i)] = i;
    auto t1 = std::chrono::steady_clock::now();
    const int64_t micro = spec.train.micro_batch_size;
    Tensor Gs = gradient_matrix(psg, D, all_rows, micro, in.pad_id);
    Tensor losses;
    Tensor Hs = gradient_matrix(psg, in.train, rows, micro, in.pad_id, &losses);
    const int64_t M = Hs.size(0);
    const double divisor = dp.divisor == "realized" ? static_cast<double>(std::max<int64_t>(M, 1))
                                                    : dp.expected_batch();
    ProjectionResult r = project(ProjectionInput{Gs, Hs, step, divisor, dp.sigma, noise});
    noise_std = std::make_pair(r.noise_std, r.noise_std_residual);
    pending_z =
        r.z.defined() ? std::optional<Tensor>(r.z.detach().to(torch::kFloat32)) : std::nullopt;
    st.batch_size = M;
    st.loss = M > 0 ? losses.mean().item<double>() : 0.0;
    st.grad_norm_mean = M > 0 ? Hs.norm(2, {1}).mean().item<double>() : 0.0;
    st.clipped_fraction = clipped_fraction(r);  // columns of the noised matrix above its bound
    st.grad_seconds += seconds_since(t1);
    st.extra = {{"synthetic_size", D.size()}};  // timing stays out of the (reproducible) history
    if (so.diagnostics && M > 0) {
      train::DirectionError de = train::direction_error(r.direction, Hs.mean(0));
      const double l2 = de.l2, cos = de.cosine;
      Tensor n = r.noised_norms.to(torch::kFloat64);
      double sm = M > 1 ? (n.std().item<double>() / n.mean().item<double>()) : 0.0;
      double mm =
          n.max().item<double>() > 0 ? n.min().item<double>() / n.max().item<double>() : 0.0;
      Tensor EH = top_basis(Hs, so.diagnostics_k), EG = top_basis(Gs, so.diagnostics_k);
      if (!E_H0.defined()) E_H0 = EH;
      Tensor ang = principal_angles_deg(E_H0, EH);
      double angle = ang.numel() ? ang.mean().item<double>() : 0.0;
      Tensor ang64 = ang.to(torch::kFloat64).contiguous();
      std::vector<double> angles(ang64.data_ptr<double>(),
                                 ang64.data_ptr<double>() + ang64.numel());
      double overlap = subspace_overlap(EG, EH);
      const double nts = r.signal_norm > 0 ? r.noise_norm / r.signal_norm : 0.0;
      d_nts.push_back(nts);
      st.extra["diagnostics"] = {{"l2", l2},
                                 {"cosine", cos},
                                 {"noise_to_signal", nts},
                                 {"norm_std_over_mean", sm},
                                 {"norm_min_over_max", mm},
                                 {"overlap_g_h", overlap},
                                 {"principal_angle_mean_deg", angle},
                                 {"principal_angles_deg", angles}};
      d_l2.push_back(l2), d_cos.push_back(cos), d_std_mean.push_back(sm), d_min_max.push_back(mm);
      d_overlap.push_back(overlap);
      if (step > 0) d_angle.push_back(angle);
    }
    ++step;
    return unflatten(r.direction.to(torch::kFloat32), psg.params());
  };
  nlohmann::json out = trainer.run(gradient);
  out["privacy"] = dp.to_json();
  out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
  if (noise_std) {  // the std the projection actually drew (dp.to_json() assumes sigma C)
    out["privacy"]["noise_std"] = noise_std->first;
    if (noise_std->second > 0) out["privacy"]["noise_std_residual"] = noise_std->second;
  }
  for (auto& [k, v] : privacy_extra.items()) out["privacy"][k] = v;
  out["synthetic"] = {
      {"size", D.size()},
      {"variation_fold", so.fold == 0 ? nlohmann::json("inf") : nlohmann::json(so.fold)},
      {"generator", so.generator_model.empty() ? "trained model" : so.generator_model},
      {"style", gb->style},
      {"random_api", gen_stats_json(generator.random_stats)},
      {"variational_api", gen_stats_json(generator.variational_stats)}};
  out["timing"]["generation_s"] = gen_seconds;
  if (so.diagnostics && !d_l2.empty())
    out["diagnostics"] = {
        {"steps", d_l2.size()},
        {"l2_mean", mean_of(d_l2)},
        {"cosine_mean", mean_of(d_cos)},
        {"noise_to_signal", mean_of(d_nts)},
        {"norm_std_over_mean", mean_of(d_std_mean)},
        {"norm_min_over_max", mean_of(d_min_max)},
        {"overlap_g_h", mean_of(d_overlap)},
        {"principal_angle_mean_deg",
         d_angle.empty() ? nlohmann::json(nullptr) : nlohmann::json(mean_of(d_angle))}};
  return out;
}

}  // namespace dpft::project

namespace dpft::project {

nlohmann::json synthetic_sft(RunContext& ctx, train::TrainInputs& in, const SyntheticOptions& so) {
  auto gb = make_generator(ctx.spec, in, so);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> texts =
      synth::syn_data_generation(*gb->gen, {}, so.size, so.fold, generation_seed(ctx.spec, 0));
  double gen_s = seconds_since(t0);
  data::LmDataset D = synthetic_dataset(texts, gb->gen->prompts().zero_shot, ctx.spec, *in.tok);
  DPFT_CHECK_AS(RuntimeError, D.size() > 0,
                "every synthetic sample was empty; check method.prompts");
  if (so.save_synthetic) save_synthetic_csv(ctx, texts, 1);
  if (so.sft_epochs > 0) sft(in.model, D, so, ctx.spec, in.pad_id);
  return {{"size", D.size()},
          {"variation_fold", so.fold == 0 ? nlohmann::json("inf") : nlohmann::json(so.fold)},
          {"generator", so.generator_model.empty() ? "trained model" : so.generator_model},
          {"style", gb->style},
          {"generation_s", gen_s},
          {"sft_epochs", so.sft_epochs},
          {"random_api", gen_stats_json(gb->gen->random_stats)},
          {"variational_api", gen_stats_json(gb->gen->variational_stats)}};
}

}  // namespace dpft::project
