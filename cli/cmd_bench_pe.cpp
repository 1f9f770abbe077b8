// `dpft bench pe-sgd`: the cost of PE-SGD's projection per step against a DP-SGD step on the
// same model and private batch (PE-SGD paper, App. D.12 / Table 11: PE-SGD computes N synthetic
// plus M~ private per-sample gradients, so the work floor is about (N + M~) / M~), interleaved
// over --reps repetitions (medians), generation excluded; then the generation throughput of
// RANDOM_API and VARIATIONAL_API (Table 12 analogue) with the shipped PubMed prompts; peak memory
// of each step kind in a child process (`--only dp|pe`). Results belong in docs/BENCHMARKS.md.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

#include "cli/app.hpp"
#include "cli/bench_common.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/synth/synthetic.hpp"
#include "core/tokenizer/load.hpp"
#include "core/train/privatize.hpp"
#include "core/train/setup.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/system.hpp"
#include "methods/pe_sgd/projection_loop.hpp"

namespace dpft {

namespace {

using Clock = std::chrono::steady_clock;

struct PeBench {
  std::string model, prompts = "experiments/prompts/pubmed.yaml", only;
  std::string noise_mode = "keyed";
  std::vector<std::string> targets = {"c_attn", "c_proj"};
  int64_t batch = 80, synthetic = 200, seq = 128, micro = 16, r = 8, gen = 20, gen_tokens = 128;
  int reps = 3;
  bool json = false;
};

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

int bench_pe(const PeBench& b) {
  std::filesystem::path dir = train::resolve_model_dir(b.model);
  model::CausalLM m = model::load_checkpoint(dir);
  model::PeftOptions po;
  po.r = b.r;
  po.alpha = 32;
  po.targets = b.targets;
  model::apply_peft(m, po, 1);
  m->train();
  const int64_t seq = std::min(b.seq, m->config().max_position), V = m->config().vocab_size;
  lm::LmDataset priv = random_rows(b.batch, seq, V, 1), D = random_rows(b.synthetic, seq, V, 2);
  std::vector<int64_t> prow, drow;
  for (int64_t i = 0; i < b.batch; ++i) prow.push_back(i);
  for (int64_t i = 0; i < b.synthetic; ++i) drow.push_back(i);
  grad::PerSampleGrads psg(m);
  train::DpSettings dp;
  dp.sigma = 1;
  dp.q = 0.2;
  dp.dataset_size = b.batch * 5;
  auto mechanisms = bench_mechanisms(b.noise_mode, dp.release());
  privacy::GaussianSum& noise = mechanisms->gaussian_sum("noise", dp.release());
  auto dp_step = [&] {
    auto t0 = Clock::now();
    train::BatchStats st;
    auto g = train::clipped_sum(psg, priv, prow, b.micro, 0, dp, &st);
    train::noise_and_scale(g, dp, noise, b.batch, &st);
    return seconds_since(t0);
  };
  double proj_share = 0;
  auto pe_step = [&] {
    auto t0 = Clock::now();
    torch::Tensor Gs = pe_sgd::gradient_matrix(psg, D, drow, b.micro, 0);
    torch::Tensor Hs = pe_sgd::gradient_matrix(psg, priv, prow, b.micro, 0);
    auto t1 = Clock::now();
    project::GramSolver solver(Gs, 1e-6);
    auto r = project::pe_project(Gs, Hs, solver, privacy::NoisePlacement::kCoefficients,
                                 {1.0, privacy::ColumnScaling::kUnitNorm, 1.0, dp.expected_batch()},
                                 noise);
    auto g = pe_sgd::unflatten(r.direction, psg.params());
    double s = seconds_since(t0);
    proj_share = seconds_since(t1) / s;
    return s;
  };
  if (!b.only.empty()) {
    DPFT_CHECK_AS(ConfigError, b.only == "dp" || b.only == "pe", "--only: dp or pe, got '{}'",
                  b.only);
    for (int i = 0; i <= b.reps; ++i) b.only == "dp" ? dp_step() : pe_step();
    std::cout << nlohmann::json{{"only", b.only}, {"peak_rss_mb", peak_rss_mb()}}.dump() << "\n";
    return 0;
  }
  dp_step(), pe_step();  // warm-up
  std::vector<double> td, tp;
  for (int i = 0; i < b.reps; ++i) td.push_back(dp_step()), tp.push_back(pe_step());
  const double d = bench_median(td), p = bench_median(tp);

  // Generation throughput with the real tokenizer and prompts.
  tok::Tokenizer tk = tok::load_tokenizer(dir);
  synth::GeneratorOptions go;
  go.gen.do_sample = true;
  go.gen.max_new_tokens = b.gen_tokens;
  synth::SyntheticGenerator gen(m, tk, synth::load_prompts(b.prompts), go);
  auto texts = gen.random_api(b.gen, 11);
  gen.variational_api(texts, 1, 12);
  auto rate = [](const synth::GenerationStats& s) {
    return s.seconds > 0 ? s.tokens / s.seconds : 0.0;
  };

  std::string common = fmt::format(
      "bench pe-sgd --batch {} --synthetic {} --seq {} --micro {} --r {} --reps {} --threads {} "
      "--quiet",
      b.batch, b.synthetic, seq, b.micro, b.r, std::max(1, b.reps / 2), torch_threads());
  if (!b.model.empty()) common += " --model " + b.model;
  for (auto& t : b.targets) common += " --targets " + t;
  nlohmann::json mem_dp = run_child(common + " --only dp"),
                 mem_pe = run_child(common + " --only pe");
  const double g_mb = static_cast<double>(b.synthetic) * static_cast<double>(psg.dim()) * 4 / 1e6;
  nlohmann::json out = {{"model", dir.string()},
                        {"trainable_parameters", psg.dim()},
                        {"batch", b.batch},
                        {"synthetic", b.synthetic},
                        {"seq", seq},
                        {"micro_batch", b.micro},
                        {"threads", torch_threads()},
                        {"dp_sgd_step_s", d},
                        {"pe_sgd_step_s", p},
                        {"time_ratio", p / d},
                        {"work_floor", static_cast<double>(b.synthetic + b.batch) / b.batch},
                        {"projection_share_of_pe_step", proj_share},
                        {"random_api",
                         {{"samples", gen.random_stats.samples},
                          {"tokens", gen.random_stats.tokens},
                          {"seconds", gen.random_stats.seconds},
                          {"tokens_per_s", rate(gen.random_stats)}}},
                        {"variational_api",
                         {{"samples", gen.variational_stats.samples},
                          {"tokens", gen.variational_stats.tokens},
                          {"seconds", gen.variational_stats.seconds},
                          {"tokens_per_s", rate(gen.variational_stats)}}},
                        {"g_matrix_mb", g_mb},
                        {"dp_peak_rss_mb", mem_dp["peak_rss_mb"]},
                        {"pe_peak_rss_mb", mem_pe["peak_rss_mb"]}};
  if (b.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
                   "PE-SGD vs DP-SGD step, {} ({} trainable), M~ = {}, N = {}, {} tokens, "
                   "micro-batch {}, {} threads\n",
                   dir.string(), psg.dim(), b.batch, b.synthetic, seq, b.micro, torch_threads())
            << fmt::format("  DP-SGD: {:8.3f} s/step\n", d)
            << fmt::format(
                   "  PE-SGD: {:8.3f} s/step  ratio {:.2f}x (work floor (N + M~)/M~ = {:.2f}; "
                   "projection {:.1f}% of the step)\n",
                   p, p / d, out["work_floor"].get<double>(), 100 * proj_share)
            << fmt::format(
                   "  generation: RANDOM_API {:.1f} tokens/s ({} samples), VARIATIONAL_API "
                   "{:.1f} tokens/s ({} samples)\n",
                   rate(gen.random_stats), gen.random_stats.samples, rate(gen.variational_stats),
                   gen.variational_stats.samples)
            << fmt::format("  peak RSS: DP-SGD {:.0f} MB, PE-SGD {:.0f} MB (G alone: {:.0f} MB)\n",
                           mem_dp["peak_rss_mb"].get<double>(), mem_pe["peak_rss_mb"].get<double>(),
                           g_mb);
  return 0;
}

}  // namespace

void register_bench_pe(CLI::App* bench, CliContext& ctx) {
  auto o = std::make_shared<PeBench>();
  CLI::App* s = bench->add_subcommand(
      "pe-sgd",
      "PE-SGD step time and memory vs DP-SGD (generation excluded), generation throughput");
  s->add_option("--model", o->model, "HF checkpoint dir (default: the embedded model)");
  s->add_option("--targets", o->targets, "LoRA target modules")->capture_default_str();
  s->add_option("--r", o->r, "LoRA rank")->capture_default_str();
  s->add_option("--batch", o->batch, "private batch size M~")->capture_default_str();
  s->add_option("--synthetic", o->synthetic, "synthetic set size N")->capture_default_str();
  s->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  s->add_option("--micro", o->micro, "physical micro-batch")->capture_default_str();
  s->add_option("--gen", o->gen, "RANDOM_API samples (then one variation each)")
      ->capture_default_str();
  s->add_option("--gen-tokens", o->gen_tokens, "max new tokens per sample")->capture_default_str();
  s->add_option("--prompts", o->prompts, "prompt file")->capture_default_str();
  s->add_option("--reps", o->reps, "timed repetitions (medians)")->capture_default_str();
  s->add_option("--noise-mode", o->noise_mode, kBenchNoiseModeHelp)
      ->check(CLI::IsMember({"keyed", "seeded", "os"}))
      ->capture_default_str();
  s->add_option("--only", o->only, "internal: run one kind (dp | pe) and print its peak RSS");
  s->add_flag("--json", o->json, "print JSON");
  s->callback([o, &ctx] { ctx.action = [o] { return bench_pe(*o); }; });
}

}  // namespace dpft
