#include "methods/bench/pe_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/synth/synthetic.hpp"
#include "core/tokenizer/load.hpp"
#include "core/train/privatize.hpp"
#include "core/train/setup.hpp"
#include "core/util/error.hpp"
#include "core/util/system.hpp"
#include "methods/bench/bench_common.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft::bench {

namespace {

// n rows of seq random tokens, all scored.
lm::LmDataset random_rows(int64_t n, int64_t seq, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor ids = torch::randint(vocab, {n, seq}, torch::kInt64);
  lm::LmDataset ds;
  for (int64_t i = 0; i < n; ++i) {
    lm::TokenizedExample e;
    e.index = i;
    for (int64_t t = 0; t < seq; ++t)
      e.ids.push_back(static_cast<int32_t>(ids[i][t].item<int64_t>()));
    e.scored.assign(static_cast<size_t>(seq), 1);
    ds.items.push_back(std::move(e));
  }
  return ds;
}

std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// The two steps on the same model: DP-SGD on the private batch of M~ rows, and PE-SGD's
// gradient matrices (N synthetic and M~ private per-sample gradients) and projection.
class PeSteps {
 public:
  PeSteps(model::CausalLM& m, const PeBench& b, int64_t seq)
      : b_(b),
        psg_(m),
        priv_(random_rows(b.batch, seq, m->config().vocab_size, 1)),
        D_(random_rows(b.synthetic, seq, m->config().vocab_size, 2)),
        prow_(all_rows(b.batch)),
        drow_(all_rows(b.synthetic)) {
    dp_.sigma = 1;
    dp_.q = 0.2;
    dp_.dataset_size = b.batch * 5;
    mechanisms_ = bench_mechanisms(b.noise_mode, dp_.release());
    noise_ = &mechanisms_->gaussian_sum("noise", dp_.release());
  }
  double dp() {
    auto t0 = BenchClock::now();
    train::BatchStats st;
    auto g = train::clipped_sum(psg_, priv_, prow_, b_.micro, 0, dp_, &st);
    train::noise_and_scale(g, dp_, *noise_, b_.batch, &st);
    return bench_seconds(t0);
  }
  double pe() {
    auto t0 = BenchClock::now();
    torch::Tensor Gs = pe_sgd::gradient_matrix(psg_, D_, drow_, b_.micro, 0);
    torch::Tensor Hs = pe_sgd::gradient_matrix(psg_, priv_, prow_, b_.micro, 0);
    auto t1 = BenchClock::now();
    project::GramSolver solver(Gs, 1e-6);
    auto r = project::pe_project(
        Gs, Hs, solver, privacy::NoisePlacement::kCoefficients,
        {1.0, privacy::ColumnScaling::kUnitNorm, 1.0, dp_.expected_batch()}, *noise_);
    auto g = pe_sgd::unflatten(r.direction, psg_.params());
    const double s = bench_seconds(t0);
    projection_share = bench_seconds(t1) / s;
    return s;
  }
  int64_t dim() const { return psg_.dim(); }
  double projection_share = 0;  // of the last PE-SGD step

 private:
  const PeBench& b_;
  grad::PerSampleGrads psg_;
  lm::LmDataset priv_, D_;
  std::vector<int64_t> prow_, drow_;
  train::DpSettings dp_;
  std::unique_ptr<privacy::Mechanisms> mechanisms_;
  privacy::GaussianSum* noise_ = nullptr;
};

nlohmann::json api_stats(const synth::GenerationStats& s) {
  return {{"samples", s.samples},
          {"tokens", s.tokens},
          {"seconds", s.seconds},
          {"tokens_per_s", s.seconds > 0 ? s.tokens / s.seconds : 0.0}};
}

}  // namespace

nlohmann::json pe_bench(const PeBench& b) {
  std::filesystem::path dir = train::resolve_model_dir(b.model);
  model::CausalLM m = model::load_checkpoint(dir);
  model::PeftOptions po;
  po.r = b.r;
  po.alpha = 32;
  po.targets = b.targets;
  model::apply_peft(m, po, 1);
  m->train();
  const int64_t seq = std::min(b.seq, m->config().max_position);
  PeSteps steps(m, b, seq);
  if (!b.only.empty()) {  // memory child: warm-up + reps of one kind, then peak RSS
    DPFT_CHECK_AS(ConfigError, b.only == "dp" || b.only == "pe", "--only: dp or pe, got '{}'",
                  b.only);
    for (int i = 0; i <= b.reps; ++i) b.only == "dp" ? steps.dp() : steps.pe();
    return {{"only", b.only}, {"peak_rss_mb", peak_rss_mb()}};
  }
  steps.dp(), steps.pe();  // warm-up
  std::vector<double> td, tp;
  for (int i = 0; i < b.reps; ++i) td.push_back(steps.dp()), tp.push_back(steps.pe());
  const double d = bench_median(td), p = bench_median(tp);
  // Generation throughput with the real tokenizer and prompts.
  tok::Tokenizer tk = tok::load_tokenizer(dir);
  synth::GeneratorOptions go;
  go.gen.do_sample = true;
  go.gen.max_new_tokens = b.gen_tokens;
  synth::SyntheticGenerator gen(m, tk, synth::load_prompts(b.prompts), go);
  auto texts = gen.random_api(b.gen, 11);
  gen.variational_api(texts, 1, 12);
  std::string common = fmt::format(
      "bench pe-sgd --batch {} --synthetic {} --seq {} --micro {} --r {} --reps {} --threads {} "
      "--quiet",
      b.batch, b.synthetic, seq, b.micro, b.r, std::max(1, b.reps / 2), torch_threads());
  if (!b.model.empty()) common += " --model " + b.model;
  for (auto& t : b.targets) common += " --targets " + t;
  nlohmann::json mem_dp = run_child(common + " --only dp"),
                 mem_pe = run_child(common + " --only pe");
  const double g_mb = static_cast<double>(b.synthetic) * static_cast<double>(steps.dim()) * 4 / 1e6;
  return {{"model", dir.string()},
          {"trainable_parameters", steps.dim()},
          {"batch", b.batch},
          {"synthetic", b.synthetic},
          {"seq", seq},
          {"micro_batch", b.micro},
          {"threads", torch_threads()},
          {"dp_sgd_step_s", d},
          {"pe_sgd_step_s", p},
          {"time_ratio", p / d},
          {"work_floor", static_cast<double>(b.synthetic + b.batch) / b.batch},
          {"projection_share_of_pe_step", steps.projection_share},
          {"random_api", api_stats(gen.random_stats)},
          {"variational_api", api_stats(gen.variational_stats)},
          {"g_matrix_mb", g_mb},
          {"dp_peak_rss_mb", mem_dp["peak_rss_mb"]},
          {"pe_peak_rss_mb", mem_pe["peak_rss_mb"]}};
}

std::string pe_bench_text(const PeBench& b, const nlohmann::json& out) {
  const double d = out["dp_sgd_step_s"].get<double>(), p = out["pe_sgd_step_s"].get<double>();
  const auto& ra = out["random_api"];
  const auto& va = out["variational_api"];
  return fmt::format(
             "PE-SGD vs DP-SGD step, {} ({} trainable), M~ = {}, N = {}, {} tokens, "
             "micro-batch {}, {} threads\n",
             out["model"].get<std::string>(), out["trainable_parameters"].get<int64_t>(), b.batch,
             b.synthetic, out["seq"].get<int64_t>(), b.micro, out["threads"].get<int>()) +
         fmt::format("  DP-SGD: {:8.3f} s/step\n", d) +
         fmt::format(
             "  PE-SGD: {:8.3f} s/step  ratio {:.2f}x (work floor (N + M~)/M~ = {:.2f}; "
             "projection {:.1f}% of the step)\n",
             p, p / d, out["work_floor"].get<double>(),
             100 * out["projection_share_of_pe_step"].get<double>()) +
         fmt::format(
             "  generation: RANDOM_API {:.1f} tokens/s ({} samples), VARIATIONAL_API "
             "{:.1f} tokens/s ({} samples)\n",
             ra["tokens_per_s"].get<double>(), ra["samples"].get<int64_t>(),
             va["tokens_per_s"].get<double>(), va["samples"].get<int64_t>()) +
         fmt::format("  peak RSS: DP-SGD {:.0f} MB, PE-SGD {:.0f} MB (G alone: {:.0f} MB)\n",
                     out["dp_peak_rss_mb"].get<double>(), out["pe_peak_rss_mb"].get<double>(),
                     out["g_matrix_mb"].get<double>());
}

}  // namespace dpft::bench
