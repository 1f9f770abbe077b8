#include "methods/bench/train_bench.hpp"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <regex>

#include <unistd.h>

#include "core/denoise/rmt.hpp"
#include "core/eval/lm_eval.hpp"
#include "core/lm/objective.hpp"
#include "core/model/peft.hpp"
#include "core/model/presets.hpp"
#include "core/project/subspace.hpp"
#include "core/train/privatize.hpp"
#include "core/train/setup.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/system.hpp"
#include "methods/bench/bench_common.hpp"

namespace dpft::bench {

namespace {

using NamedParams = std::vector<std::pair<std::string, torch::Tensor>>;

// The model (a random-init preset, LoRA or full fine-tuning, on --device in --dtype) and one
// fixed batch of random tokens, all scored (encoders: random classes; encoder-decoders: a
// random source of seq tokens and a target of seq tokens each).
struct Setup {
  model::ModelConfig c;
  bool encoder = false, seq2seq = false;
  model::CausalLM m = nullptr;
  torch::Device dev = torch::kCPU;
  int64_t seq = 0, micro = 0;
  lm::LmDataset ds;
  std::vector<int64_t> rows;
  NamedParams params;
  void sync() const {  // GPU work is asynchronous: time it to completion
    if (dev.is_cuda()) torch::cuda::synchronize();
  }
};

void make_model(const TrainBench& b, Setup& s) {
  s.c = model::preset_config(b.arch, b.preset, b.vocab);
  s.encoder = s.c.is_encoder();
  if (s.encoder) {  // sequence classification (2 classes), the DP-SFT / denoising papers' task
    s.c.head = model::EncoderHead::kSequenceClassification;
    s.c.labels = {"LABEL_0", "LABEL_1"};
  }
  s.m = model::make_causal_lm(s.c, 0);
  model::PeftOptions po;
  po.kind = enum_value(b.peft, model::kPeftKindNames, "--peft");
  po.r = b.r;
  po.targets = !b.targets.empty() ? b.targets : model::auto_targets(b.arch, po.kind);
  if (s.encoder && b.peft == "lora") po.modules_to_save = {"classifier"};
  model::apply_peft(s.m, po, 1);
  const torch::Dtype dtype = train::dtype_named(b.dtype, "--dtype");
  static const std::regex device_re("cpu|cuda(:[0-9]+)?");
  DPFT_CHECK_AS(ConfigError, std::regex_match(b.device, device_re),
                "--device {}: use cpu, cuda or cuda:N", b.device);
  DPFT_CHECK_AS(ConfigError, b.device == "cpu" || cuda_available(),
                "--device {}: this dpft's LibTorch has no CUDA or sees no GPU", b.device);
  s.dev = torch::Device(b.device);
  DPFT_CHECK_AS(ConfigError, dtype != torch::kFloat16 || s.dev.is_cuda(),
                "--dtype float16 needs a GPU (no CPU float16 kernels); use bfloat16");
  s.m->to(s.dev, dtype);  // as a run with model.dtype / device places it
  s.m->train();
}

void make_batch(const TrainBench& b, Setup& s) {
  s.seq = std::min(b.seq, s.c.usable_positions());
  s.micro = b.micro > 0 ? b.micro : b.batch;
  s.seq2seq = s.c.is_seq2seq();
  if (s.encoder) s.ds.objective = lm::Objective::kClassification;
  if (s.seq2seq) s.ds.objective = lm::Objective::kSeq2Seq;
  torch::manual_seed(0);
  torch::Tensor ids = torch::randint(s.c.vocab_size, {b.batch, s.seq}, torch::kInt64),
                src = torch::randint(s.c.vocab_size, {b.batch, s.seq}, torch::kInt64);
  auto to_ids = [](const torch::Tensor& row) {  // (seq) int64 -> token ids
    std::vector<int32_t> v;
    auto acc = row.accessor<int64_t, 1>();
    for (int64_t t = 0; t < row.size(0); ++t) v.push_back(static_cast<int32_t>(acc[t]));
    return v;
  };
  for (int64_t i = 0; i < b.batch; ++i) {
    lm::TokenizedExample e;
    e.index = i;
    e.ids = to_ids(ids[i].contiguous());
    if (s.seq2seq) e.src_ids = to_ids(src[i].contiguous());
    e.scored.assign(static_cast<size_t>(s.seq), s.encoder ? 0 : 1);
    e.class_id = i % 2;
    s.ds.items.push_back(std::move(e));
  }
  for (int64_t i = 0; i < b.batch; ++i) s.rows.push_back(i);
  s.params = model::trainable_parameters(s.m);
}

grad::GradOptions grad_options(const TrainBench& b) {
  grad::GradOptions go;
  go.mode = enum_value(b.grad_mode, grad::kGradModeNames, "--grad-mode");
  return go;
}

// The steps the benchmark times, each returning its seconds.
class TrainSteps {
 public:
  TrainSteps(Setup& s, const TrainBench& b) : s_(s), b_(b), psg_(s.m, grad_options(b)) {
    dp_.sigma = 1;
    dp_.q = 0.01;
    dp_.dataset_size = b.batch * 100;
    mechanisms_ = bench_mechanisms(b.noise_mode, dp_.release());
    noise_ = &mechanisms_->gaussian_sum(
        "noise", dp_.release(), enum_value(b.noise_draw, privacy::kNoiseDrawNames, "--noise-draw"));
  }

  double nonprivate() {  // forward + autograd backward of the mean loss
    auto t0 = BenchClock::now();
    for (auto& [n, p] : s_.params) p.mutable_grad() = torch::Tensor();
    for (int64_t i = 0; i < b_.batch; i += s_.micro) {
      std::vector<int64_t> chunk(s_.rows.begin() + i,
                                 s_.rows.begin() + std::min(b_.batch, i + s_.micro));
      lm::LmBatch mb = lm::collate(s_.ds, chunk, 0);
      auto losses = lm::sample_losses(*s_.m, mb);  // (B), the batch's objective
      (losses.sum() / static_cast<double>(b_.batch)).backward();
    }
    s_.sync();
    return bench_seconds(t0);
  }

  double dp() {  // per-sample gradients, clipping, the clipped sum, noise; keeps the gradient
    auto t0 = BenchClock::now();
    train::BatchStats st;
    auto g = train::clipped_sum(psg_, s_.ds, s_.rows, s_.micro, 0, dp_, &st);
    train::noise_and_scale(g, dp_, *noise_, b_.batch, &st);
    last_grad = g;
    s_.sync();
    const double sec = bench_seconds(t0);
    psg_share = st.grad_seconds / sec;
    noise_share = st.noise_seconds / sec;  // without the device sync: a lower bound on a GPU
    return sec;
  }

  double per_layer() {  // --per-layer: the dp() step with each parameter clipped on its own
    train::DpSettings d = dp_;
    d.clipping_style = privacy::ClippingStyle::kPerLayer;
    auto t0 = BenchClock::now();
    train::BatchStats st;
    auto g = train::clipped_sum(psg_, s_.ds, s_.rows, s_.micro, 0, d, &st);
    train::noise_and_scale(g, d, *noise_, b_.batch, &st);
    s_.sync();
    return bench_seconds(t0);
  }

  double unit() {  // --unit-rows K: the same rows as users of K rows, each user clipped as one
    auto t0 = BenchClock::now();
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < b_.batch; i += b_.unit_rows) starts.push_back(i);
    train::BatchStats st;
    auto g = train::unit_clipped_sum(psg_, s_.ds, s_.rows, starts, s_.micro, 0, dp_, &st);
    train::noise_and_scale(g, dp_, *noise_, static_cast<int64_t>(starts.size()), &st);
    s_.sync();
    return bench_seconds(t0);
  }

  // --dp-sft K: P (d, K) random orthonormal over the trainable parameters, on the model's
  // device, in --dp-sft-storage; orthonormalised in float32, stored and orthonormalised again
  // there, as project::subspace_from_trajectory makes the P of a run.
  void make_subspace() {
    DPFT_CHECK_AS(ConfigError, b_.dp_sft_k >= 0, "--dp-sft: a subspace dimension k >= 1 (0 = off)");
    storage = train::dtype_named(b_.dp_sft_storage, "--dp-sft-storage");
    DPFT_CHECK_AS(ConfigError, storage == torch::kFloat32 || storage == torch::kBFloat16,
                  "--dp-sft-storage: float32 or bfloat16");
    d = model::count_parameters(s_.m, true);
    if (b_.dp_sft_k == 0) return;
    DPFT_CHECK_AS(ConfigError, b_.dp_sft_k <= d, "--dp-sft {}: more than the {} trainable values",
                  b_.dp_sft_k, d);
    torch::manual_seed(1);
    torch::Tensor P = torch::randn({d, b_.dp_sft_k}, torch::TensorOptions().device(s_.dev));
    project::orthonormalize_columns_(P);
    if (storage != torch::kFloat32) {
      P32 = P;
      P = P.to(storage);
      project::orthonormalize_columns_(P);
    }
    sft_blocks = blocks_of(P);
  }

  double sft() {  // a stage-2 step of method dp-sft (methods/dp_sft/dp_sft.cpp)
    auto t0 = BenchClock::now();
    train::BatchStats st;
    std::vector<torch::Tensor> gs = {train::projected_clipped_sum(psg_, s_.ds, s_.rows, s_.micro, 0,
                                                                  sft_blocks, dp_, &st)};  // (k)
    train::noise_and_scale(gs, dp_, *noise_, b_.batch, &st);
    std::vector<torch::Tensor> g;
    for (size_t i = 0; i < sft_blocks.size(); ++i)
      g.push_back(project::lift_block(sft_blocks[i], gs[0]).view(s_.params[i].second.sizes()));
    s_.sync();
    return bench_seconds(t0);
  }

  // P's rows per parameter, (numel, k) each. P: (d, k).
  std::vector<torch::Tensor> blocks_of(const torch::Tensor& P) const {
    std::vector<torch::Tensor> out;
    int64_t off = 0;
    for (auto& [n, p] : s_.params)
      out.push_back(P.slice(0, off, off + p.numel())), off += p.numel();
    return out;
  }
  // P^T g of the batch's clipped per-sample gradients, float64 (k).
  torch::Tensor projected_sum(const std::vector<torch::Tensor>& blocks) {
    train::BatchStats st;
    return train::projected_clipped_sum(psg_, s_.ds, s_.rows, s_.micro, 0, blocks, dp_, &st)
        .to(torch::kDouble);
  }
  bool noise_on_device() const { return noise_->draws_on(s_.dev); }
  double sigma_sum() const { return dp_.sigma * dp_.clip_norm; }

  std::vector<torch::Tensor> last_grad;   // the last DP step's noisy gradient (--denoise)
  double psg_share = 0, noise_share = 0;  // of the last DP step
  std::vector<torch::Tensor> sft_blocks;  // P's rows per parameter, (numel, k)
  torch::Tensor P32;  // (d, k) float32 P, kept when P is stored in bfloat16 (its error)
  torch::Dtype storage = torch::kFloat32;
  int64_t d = 0;  // trainable values

 private:
  Setup& s_;
  const TrainBench& b_;
  grad::PerSampleGrads psg_;
  train::DpSettings dp_;
  std::unique_ptr<privacy::Mechanisms> mechanisms_;
  privacy::GaussianSum* noise_ = nullptr;
};

// --denoise (paper 003): the post-processing of the noisy gradient's 2-D blocks (embeddings and
// heads excluded, as method denoise does by default), timed after each DP step on that step's
// gradient: the naive per-matrix exact SVD loop, the batched exact SVD screened by eigvalsh
// (what method denoise uses with diagnostics on) or by a Cholesky certificate (what it uses
// otherwise), the batched randomized top-k SVD.
class DenoiseTimer {
 public:
  static constexpr size_t kWays = 4;
  static constexpr std::array<const char*, kWays> kNames = {"naive", "batched", "batched_cholesky",
                                                            "randomized"};
  DenoiseTimer(const Setup& s, double sigma_e) : s_(s), sigma_e_(sigma_e) {
    for (size_t i = 0; i < s.params.size(); ++i)
      if (s.params[i].second.dim() == 2 && !denoise::excluded_by_default(s.params[i].first))
        blocks.push_back(i);
  }
  void time(const std::vector<torch::Tensor>& grad) {
    std::vector<torch::Tensor> ys;
    for (size_t i : blocks) ys.push_back(grad[i]);
    const std::vector<double> sig(ys.size(), sigma_e_);
    denoise::Options exact, chol, rnd;
    chol.screen = denoise::Screen::kCholesky;
    rnd.svd = denoise::Svd::kRandomized;
    for (size_t k = 0; k < kWays; ++k) {
      std::vector<denoise::Outcome> outs;
      auto t0 = BenchClock::now();
      if (k == 0)
        for (const auto& y : ys) denoise::denoise_matrix(y, sigma_e_, exact);
      else
        denoise::denoise_batched(ys, sig,
                                 k == 1   ? exact
                                 : k == 2 ? chol
                                          : rnd,
                                 k == 1 ? &outs : nullptr);
      s_.sync();
      if (k == 1) {
        int64_t c = 0;
        for (const auto& oc : outs) c += oc.denoised;
        denoised_blocks.push_back(c);
      }
      seconds_[k].push_back(bench_seconds(t0));
    }
  }
  void reset() {  // after the warm-up
    seconds_ = {};
    denoised_blocks.clear();
  }
  nlohmann::json report(double dp_step) const {
    nlohmann::json j;
    for (size_t k = 0; k < kWays; ++k) {
      const double t = bench_median(seconds_[k]);
      j[kNames[k]] = {{"seconds", t}, {"overhead_of_dp_step", t / dp_step}};
    }
    j["blocks"] = blocks.size();
    j["denoised_blocks_per_step"] = denoised_blocks;
    return j;
  }

  std::vector<size_t> blocks;            // parameter indices
  std::vector<int64_t> denoised_blocks;  // per timed step (the batched run's decisions)

 private:
  const Setup& s_;
  double sigma_e_;
  std::array<std::vector<double>, kWays> seconds_;
};

// What bfloat16 storage does to P and to the projected clipped sum: relative errors against
// the float32 P, and max |P^T P - I| (block by block, in float32: a block at a time fits a GPU).
nlohmann::json bfloat16_effect(TrainSteps& steps, int64_t k) {
  const std::vector<torch::Tensor> b32 = steps.blocks_of(steps.P32);
  const torch::Tensor g32 = steps.projected_sum(b32), gbf = steps.projected_sum(steps.sft_blocks);
  torch::Tensor gram = torch::zeros({k, k}, steps.P32.options().dtype(torch::kDouble));
  double diff2 = 0;
  for (size_t i = 0; i < steps.sft_blocks.size(); ++i) {
    const torch::Tensor pb = steps.sft_blocks[i].to(torch::kFloat32);
    gram += pb.t().mm(pb).to(torch::kDouble);
    diff2 += (pb - b32[i]).pow(2).sum().item<double>();
  }
  const double orth = (gram - torch::eye(k, gram.options())).abs().max().item<double>();
  return {{"projected_sum_rel_error", ((gbf - g32).norm() / g32.norm()).item<double>()},
          {"orthonormality_max_error", orth},
          {"p_rel_error", std::sqrt(diff2) / steps.P32.norm().item<double>()}};
}

// Building P: k trajectory rows flat(Theta) written (Alg. 1 line 13: flattening to a float32
// host vector and one safetensors file each), then the Gram-route SVD of the k x d matrix.
// Returns {trajectory_row_s (median), svd_s}.
std::pair<double, double> time_building_p(const Setup& s, int64_t k, int64_t d,
                                          torch::Dtype storage) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dpft-bench-traj-{}", getpid());
  std::vector<double> trow;
  double tsvd = 0;
  {
    project::Trajectory traj(dir, d);
    for (int64_t r = 0; r < k; ++r) {
      auto t0 = BenchClock::now();
      std::vector<torch::Tensor> flat;
      for (auto& [n, p] : s.params)
        flat.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kFloat32));
      torch::Tensor row = torch::cat(flat);
      row.add_(torch::randn({d}).mul_(1e-3));  // rows apart, as training moves them
      traj.append(row);
      trow.push_back(bench_seconds(t0));
    }
    auto t0 = BenchClock::now();
    project::subspace_from_trajectory(traj, k, nullptr, storage);
    tsvd = bench_seconds(t0);
  }
  remove_tree(dir);
  return {bench_median(trow), tsvd};
}

// Classification evaluation throughput (encoders): no-grad forward + metrics, examples/s.
double eval_throughput(const TrainBench& b, Setup& s) {
  std::vector<double> te;
  for (int i = 0; i <= b.reps; ++i) {
    auto t0 = BenchClock::now();
    eval::evaluate_lm(s.m, s.ds, s.micro, 0, 0);
    s.sync();
    if (i > 0) te.push_back(bench_seconds(t0));
  }
  return static_cast<double>(b.batch) / bench_median(te);
}

}  // namespace

nlohmann::json train_bench(const TrainBench& b) {
  DPFT_CHECK_AS(ConfigError, b.unit_rows >= 0 && b.unit_rows <= b.batch,
                "--unit-rows {}: rows per user, from 1 to --batch {} (0 = off)", b.unit_rows,
                b.batch);
  Setup s;
  make_model(b, s);
  make_batch(b, s);
  TrainSteps steps(s, b);
  steps.make_subspace();
  if (!b.only.empty()) {  // memory child: warm-up + reps of one kind, then peak RSS
    DPFT_CHECK_AS(ConfigError, b.only == "np" || b.only == "dp" || b.only == "sft",
                  "--only: np, dp or sft, got '{}'", b.only);
    for (int i = 0; i <= b.reps; ++i)
      b.only == "np" ? steps.nonprivate() : b.only == "dp" ? steps.dp() : steps.sft();
    return {{"only", b.only}, {"peak_rss_mb", peak_rss_mb()}};
  }
  DenoiseTimer dn(s, steps.sigma_sum() / static_cast<double>(b.batch));
  DPFT_CHECK_AS(ConfigError, !b.denoise || !dn.blocks.empty(),
                "--denoise: no trainable 2-D block outside embeddings and heads to denoise");
  steps.nonprivate(), steps.dp();  // warm-up
  if (b.denoise) dn.time(steps.last_grad), dn.reset();
  if (b.dp_sft_k > 0) steps.sft();
  if (b.unit_rows > 0) steps.unit();
  if (b.per_layer) steps.per_layer();
  std::vector<double> tn, td, ts, tu, tl;
  for (int i = 0; i < b.reps; ++i) {
    tn.push_back(steps.nonprivate()), td.push_back(steps.dp());
    if (b.dp_sft_k > 0) ts.push_back(steps.sft());
    if (b.unit_rows > 0) tu.push_back(steps.unit());
    if (b.per_layer) tl.push_back(steps.per_layer());
    if (b.denoise) dn.time(steps.last_grad);
  }
  const double n = bench_median(tn), d_step = bench_median(td);
  const double fwd = forward_flops_per_token(s.m, s.seq) * static_cast<double>(b.batch * s.seq);
  // Backward: activation gradients (= forward) always; weight gradients (= forward's share of
  // the trainable matrices) only for full fine-tuning.
  const double np_flops = fwd * (b.peft == "full" ? 3.0 : 2.0);
  const double gemm = sgemm_gflops(s.dev);
  std::string common = fmt::format(
      "bench train --arch {} --preset {} --vocab {} --batch {} --seq {} --micro {} "
      "--peft {} --r {} --grad-mode {} --reps {} --threads {} --dtype {} --device {} "
      "--noise-draw {} --noise-mode {} --quiet",
      b.arch, b.preset, b.vocab, b.batch, s.seq, s.micro, b.peft, b.r, b.grad_mode,
      std::max(1, b.reps / 2), torch_threads(), b.dtype, b.device, b.noise_draw, b.noise_mode);
  for (auto& t : b.targets) common += " --targets " + t;
  const double rss_np = run_child(common + " --only np")["peak_rss_mb"].get<double>(),
               rss_dp = run_child(common + " --only dp")["peak_rss_mb"].get<double>();
  nlohmann::json out = {
      {"model", fmt::format("{} {} (vocab {})", b.arch, b.preset, s.c.vocab_size)},
      {"peft", b.peft},
      {"trainable_parameters", model::count_parameters(s.m, true)},
      {"batch", b.batch},
      {"seq", s.seq},
      {"micro_batch", s.micro},
      {"threads", torch_threads()},
      {"dtype", b.dtype},
      {"device", b.device},
      {"grad_mode", b.grad_mode},
      {"noise_draw", steps.noise_on_device() ? "device" : "host"},
      {"noise_mode", b.noise_mode},
      {"nonprivate_step_s", n},
      {"dp_step_s", d_step},
      {"time_ratio", d_step / n},
      {"per_sample_grad_share_of_dp_step", steps.psg_share},
      {"noise_share_of_dp_step", steps.noise_share},
      {"nonprivate_gflops", np_flops / n / 1e9},
      {"sgemm_gflops", gemm},
      {"nonprivate_peak_rss_mb", rss_np},
      {"dp_peak_rss_mb", rss_dp},
      {"memory_ratio", rss_dp / rss_np}};
  if (b.dp_sft_k > 0) {
    nlohmann::json effect;
    if (steps.P32.defined()) effect = bfloat16_effect(steps, b.dp_sft_k);
    steps.sft_blocks.clear();  // P's memory back before the SVD's
    steps.P32 = torch::Tensor();
    const auto [trow, tsvd] = time_building_p(s, b.dp_sft_k, steps.d, steps.storage);
    const double t = bench_median(ts);
    const nlohmann::json mem_sft =
        run_child(common + fmt::format(" --dp-sft {} --dp-sft-storage {} --only sft", b.dp_sft_k,
                                       b.dp_sft_storage));
    out["dp_sft"] = {{"k", b.dp_sft_k},
                     {"storage", b.dp_sft_storage},
                     {"stage2_step_s", t},
                     {"ratio_to_dp_step", t / d_step},
                     {"ratio_to_nonprivate_step", t / n},
                     {"stage2_peak_rss_mb", mem_sft["peak_rss_mb"]},
                     {"trajectory_row_s", trow},
                     {"svd_s", tsvd}};
    if (!effect.is_null()) out["dp_sft"]["bfloat16_effect"] = effect;
  }
  if (b.unit_rows > 0) {
    const double t = bench_median(tu);
    out["user_level"] = {{"rows_per_user", b.unit_rows},
                         {"users", (b.batch + b.unit_rows - 1) / b.unit_rows},
                         {"dp_step_s", t},
                         {"ratio_to_dp_step", t / d_step}};
  }
  if (b.per_layer) {
    const double t = bench_median(tl);
    out["per_layer"] = {{"parts", static_cast<int64_t>(s.params.size())},
                        {"dp_step_s", t},
                        {"ratio_to_dp_step", t / d_step}};
  }
  if (b.denoise) out["denoise"] = dn.report(d_step);
  if (s.encoder) out["eval_examples_per_s"] = eval_throughput(b, s);
  return out;
}

std::string train_bench_text(const TrainBench& b, const nlohmann::json& out) {
  const double n = out["nonprivate_step_s"].get<double>(), d = out["dp_step_s"].get<double>();
  const double gflops = out["nonprivate_gflops"].get<double>(),
               gemm = out["sgemm_gflops"].get<double>();
  std::string t = fmt::format(
      "train step, {}, {} fine-tuning ({} trainable), batch {} x {} tokens, micro-batch {}, {} "
      "threads, {} on {}, noise drawn on the {}\n",
      out["model"].get<std::string>(), b.peft, out["trainable_parameters"].get<int64_t>(), b.batch,
      out["seq"].get<int64_t>(), out["micro_batch"].get<int64_t>(), out["threads"].get<int>(),
      b.dtype, b.device, out["noise_draw"].get<std::string>());
  t += fmt::format(
      "  non-private: {:8.3f} s/step  ({:.1f} GFLOP/s model FLOPs; sgemm {:.1f} GFLOP/s -> "
      "{:.0f}%)\n",
      n, gflops, gemm, 100 * gflops / gemm);
  t += fmt::format("  DP-SGD:      {:8.3f} s/step  ratio {:.2f}x\n", d, d / n);
  t += fmt::format("  peak RSS:    non-private {:.0f} MB, DP-SGD {:.0f} MB, ratio {:.2f}x\n",
                   out["nonprivate_peak_rss_mb"].get<double>(), out["dp_peak_rss_mb"].get<double>(),
                   out["memory_ratio"].get<double>());
  if (b.denoise) {
    const auto& j = out["denoise"];
    t += fmt::format("  denoise ({} blocks, denoised per step: {}) after the DP-SGD step:",
                     j["blocks"].get<int64_t>(),
                     fmt::join(j["denoised_blocks_per_step"].get<std::vector<int64_t>>(), " "));
    for (const char* k : DenoiseTimer::kNames)
      t += fmt::format(" {} {:.3f} s ({:.2f}%)", k, j[k]["seconds"].get<double>(),
                       100 * j[k]["overhead_of_dp_step"].get<double>());
    t += "\n";
  }
  if (b.dp_sft_k > 0) {
    const auto& j = out["dp_sft"];
    t += fmt::format(
        "  DP-SFT stage 2 (k {}, P in {}): {:8.3f} s/step  {:.2f}x DP-SGD, {:.2f}x non-private; "
        "peak RSS {:.0f} MB\n  building P: {:.3f} s per trajectory row, Gram-route SVD of {} "
        "rows {:.3f} s\n",
        b.dp_sft_k, b.dp_sft_storage, j["stage2_step_s"].get<double>(),
        j["ratio_to_dp_step"].get<double>(), j["ratio_to_nonprivate_step"].get<double>(),
        j["stage2_peak_rss_mb"].get<double>(), j["trajectory_row_s"].get<double>(), b.dp_sft_k,
        j["svd_s"].get<double>());
    if (j.contains("bfloat16_effect"))
      t += fmt::format(
          "  bfloat16 P against float32 P: relative error of P {:.2e}, of the projected clipped "
          "sum {:.2e}; max |P^T P - I| {:.2e}\n",
          j["bfloat16_effect"]["p_rel_error"].get<double>(),
          j["bfloat16_effect"]["projected_sum_rel_error"].get<double>(),
          j["bfloat16_effect"]["orthonormality_max_error"].get<double>());
  }
  if (b.unit_rows > 0) {
    const auto& j = out["user_level"];
    t += fmt::format("  DP-SGD, user level ({} users of {} rows): {:8.3f} s/step  {:.2f}x DP-SGD\n",
                     j["users"].get<int64_t>(), b.unit_rows, j["dp_step_s"].get<double>(),
                     j["ratio_to_dp_step"].get<double>());
  }
  if (b.per_layer) {
    const auto& j = out["per_layer"];
    t += fmt::format("  DP-SGD, per-layer clipping ({} parts): {:8.3f} s/step  {:.2f}x DP-SGD\n",
                     j["parts"].get<int64_t>(), j["dp_step_s"].get<double>(),
                     j["ratio_to_dp_step"].get<double>());
  }
  if (out.contains("eval_examples_per_s"))
    t += fmt::format("  classification eval: {:.1f} examples/s (micro-batch {})\n",
                     out["eval_examples_per_s"].get<double>(), out["micro_batch"].get<int64_t>());
  return t;
}

}  // namespace dpft::bench
