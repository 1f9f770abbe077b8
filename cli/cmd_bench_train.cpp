// `dpft bench train`: the cost of privacy per training step, measured in one process on one
// fixed batch of random tokens: a non-private step (forward + autograd backward of the mean
// loss) and a DP-SGD step (per-sample gradients, clipping, the clipped sum, noise), interleaved
// over --reps repetitions (medians reported, so machine noise hits both alike). Peak memory of
// each kind is measured in a child process of its own (`--only np|dp`), since peak RSS is per
// process. An encoder-decoder (--arch bart) trains on pairs of random sources and targets of --seq
// tokens each (the model FLOPs count a source and a target token as one token's worth of the whole
// model). --denoise adds method denoise's post-processing of each DP step's gradient (paper
// 003); --dp-sft K a DP-SFT stage-2 step (paper 002, Alg. 2: per-sample P^T g_i, clipping in
// R^k, noise, P g~^s) on a random orthonormal P of k columns, interleaved with the other two,
// and what building P costs (one trajectory row written, the Gram-route SVD of k rows).
// Results belong in docs/BENCHMARKS.md.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <regex>

#include <unistd.h>

#include "cli/app.hpp"
#include "cli/bench_common.hpp"
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

namespace dpft {

namespace {

using Clock = std::chrono::steady_clock;

struct TrainBench {
  std::string arch = "gpt2", preset = "small", peft = "lora", grad_mode = "auto", only;
  std::string dtype = "float32", device = "cpu", dp_sft_storage = "float32", noise_draw = "auto",
              noise_mode = "keyed";
  std::vector<std::string> targets;
  int64_t vocab = 50257, batch = 32, seq = 128, micro = 0, r = 8, dp_sft_k = 0;
  int reps = 5;
  bool json = false, denoise = false;
};

}  // namespace

double bench_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

nlohmann::json run_child(const std::string& args) {
  // Resolved here: inside the shell popen starts, /proc/self/exe would be the shell.
  std::string cmd = std::filesystem::read_symlink("/proc/self/exe").string() + " " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  DPFT_CHECK(p != nullptr, "cannot start {}", cmd);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  auto start = out.rfind("\n{");
  return nlohmann::json::parse(start == std::string::npos ? out : out.substr(start + 1));
}

namespace {

int bench_train(const TrainBench& b) {
  model::ModelConfig c = model::preset_config(b.arch, b.preset, b.vocab);
  const bool encoder = c.is_encoder();
  if (encoder) {  // sequence classification (2 classes), the DP-SFT / denoising papers' task
    c.head = model::EncoderHead::kSequenceClassification;
    c.labels = {"LABEL_0", "LABEL_1"};
  }
  model::CausalLM m = model::make_causal_lm(c, 0);
  model::PeftOptions po;
  po.kind = enum_value(b.peft, model::kPeftKindNames, "--peft");
  po.r = b.r;
  po.targets = !b.targets.empty() ? b.targets
               : b.peft == "full" ? std::vector<std::string>{"all"}
               : b.arch == "gpt2" ? std::vector<std::string>{"c_attn"}
               : encoder          ? std::vector<std::string>{"query", "value"}
                                  : std::vector<std::string>{"q_proj", "v_proj"};
  if (encoder && b.peft == "lora") po.modules_to_save = {"classifier"};
  model::apply_peft(m, po, 1);
  const torch::Dtype dtype = train::dtype_named(b.dtype, "--dtype");
  static const std::regex device_re("cpu|cuda(:[0-9]+)?");
  DPFT_CHECK_AS(ConfigError, std::regex_match(b.device, device_re),
                "--device {}: use cpu, cuda or cuda:N", b.device);
  DPFT_CHECK_AS(ConfigError, b.device == "cpu" || cuda_available(),
                "--device {}: this dpft's LibTorch has no CUDA or sees no GPU", b.device);
  const torch::Device dev(b.device);
  DPFT_CHECK_AS(ConfigError, dtype != torch::kFloat16 || dev.is_cuda(),
                "--dtype float16 needs a GPU (no CPU float16 kernels); use bfloat16");
  m->to(dev, dtype);  // as a run with model.dtype / device places it
  m->train();
  auto sync = [&] {  // GPU work is asynchronous: time it to completion
    if (dev.is_cuda()) torch::cuda::synchronize();
  };
  const int64_t seq = std::min(b.seq, c.usable_positions()),
                micro = b.micro > 0 ? b.micro : b.batch;
  // One fixed batch: random tokens, all scored (encoders: random classes).
  // Encoder-decoders (BART): a random source of seq tokens and a target of seq tokens each.
  const bool seq2seq = c.is_seq2seq();
  lm::LmDataset ds;
  if (encoder) ds.objective = lm::Objective::kClassification;
  if (seq2seq) ds.objective = lm::Objective::kSeq2Seq;
  torch::manual_seed(0);
  torch::Tensor ids = torch::randint(c.vocab_size, {b.batch, seq}, torch::kInt64),
                src = torch::randint(c.vocab_size, {b.batch, seq}, torch::kInt64);
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
    if (seq2seq) e.src_ids = to_ids(src[i].contiguous());
    e.scored.assign(static_cast<size_t>(seq), encoder ? 0 : 1);
    e.class_id = i % 2;
    ds.items.push_back(std::move(e));
  }
  std::vector<int64_t> rows(static_cast<size_t>(b.batch));
  for (int64_t i = 0; i < b.batch; ++i) rows[static_cast<size_t>(i)] = i;
  auto params = model::trainable_parameters(m);

  auto np_step = [&] {
    auto t0 = Clock::now();
    for (auto& [n, p] : params) p.mutable_grad() = torch::Tensor();
    for (int64_t i = 0; i < b.batch; i += micro) {
      std::vector<int64_t> chunk(rows.begin() + i, rows.begin() + std::min(b.batch, i + micro));
      lm::LmBatch mb = lm::collate(ds, chunk, 0);
      auto losses = lm::sample_losses(*m, mb);  // (B), the batch's objective
      (losses.sum() / static_cast<double>(b.batch)).backward();
    }
    sync();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  grad::GradOptions go;
  go.mode = enum_value(b.grad_mode, grad::kGradModeNames, "--grad-mode");
  grad::PerSampleGrads psg(m, go);
  train::DpSettings dp;
  dp.sigma = 1;
  dp.q = 0.01;
  dp.dataset_size = b.batch * 100;
  auto mechanisms = bench_mechanisms(b.noise_mode, dp.release());
  privacy::GaussianSum& noise = mechanisms->gaussian_sum(
      "noise", dp.release(), enum_value(b.noise_draw, privacy::kNoiseDrawNames, "--noise-draw"));
  double psg_share = 0, noise_share = 0;
  std::vector<torch::Tensor> last_grad;  // the last DP step's noisy gradient (--denoise)
  auto dp_step = [&] {
    auto t0 = Clock::now();
    train::BatchStats st;
    auto g = train::clipped_sum(psg, ds, rows, micro, 0, dp, &st);
    train::noise_and_scale(g, dp, noise, b.batch, &st);
    last_grad = g;
    sync();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    psg_share = st.grad_seconds / s;
    noise_share = st.noise_seconds / s;  // without the device sync: a lower bound on a GPU
    return s;
  };
  // --dp-sft K: P (d, K) random orthonormal over the trainable parameters, on the model's
  // device, in --dp-sft-storage; a stage-2 step is method dp-sft's (methods/dp_sft/dp_sft.cpp).
  DPFT_CHECK_AS(ConfigError, b.dp_sft_k >= 0, "--dp-sft: a subspace dimension k >= 1 (0 = off)");
  const torch::Dtype sft_storage = train::dtype_named(b.dp_sft_storage, "--dp-sft-storage");
  DPFT_CHECK_AS(ConfigError, sft_storage == torch::kFloat32 || sft_storage == torch::kBFloat16,
                "--dp-sft-storage: float32 or bfloat16");
  const int64_t d = model::count_parameters(m, true);
  std::vector<torch::Tensor> sft_blocks;  // P's rows per parameter, (numel, k)
  torch::Tensor P32;  // (d, k) float32 P, kept when P is stored in bfloat16 (its error, below)
  if (b.dp_sft_k > 0) {
    DPFT_CHECK_AS(ConfigError, b.dp_sft_k <= d, "--dp-sft {}: more than the {} trainable values",
                  b.dp_sft_k, d);
    torch::manual_seed(1);
    // Orthonormalised in float32, stored in --dp-sft-storage and orthonormalised again there, as
    // project::subspace_from_trajectory makes the P of a run.
    torch::Tensor P = torch::randn({d, b.dp_sft_k}, torch::TensorOptions().device(dev));
    project::orthonormalize_columns_(P);
    if (sft_storage != torch::kFloat32) {
      P32 = P;
      P = P.to(sft_storage);
      project::orthonormalize_columns_(P);
    }
    int64_t off = 0;
    for (auto& [n, p] : params)
      sft_blocks.push_back(P.slice(0, off, off + p.numel())), off += p.numel();
  }
  auto sft_step = [&] {
    auto t0 = Clock::now();
    train::BatchStats st;
    std::vector<torch::Tensor> gs = {
        train::projected_clipped_sum(psg, ds, rows, micro, 0, sft_blocks, dp, &st)};  // (k)
    train::noise_and_scale(gs, dp, noise, b.batch, &st);
    std::vector<torch::Tensor> g;
    for (size_t i = 0; i < sft_blocks.size(); ++i)
      g.push_back(project::lift_block(sft_blocks[i], gs[0]).view(params[i].second.sizes()));
    sync();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  if (!b.only.empty()) {  // memory child: warm-up + reps of one kind, then peak RSS
    DPFT_CHECK_AS(ConfigError, b.only == "np" || b.only == "dp" || b.only == "sft",
                  "--only: np, dp or sft, got '{}'", b.only);
    for (int i = 0; i <= b.reps; ++i)
      b.only == "np" ? np_step() : b.only == "dp" ? dp_step() : sft_step();
    std::cout << nlohmann::json{{"only", b.only}, {"peak_rss_mb", peak_rss_mb()}}.dump() << "\n";
    return 0;
  }
  // --denoise (paper 003): the post-processing of the noisy gradient's 2-D blocks (embeddings
  // and heads excluded, as method denoise does by default), timed after each DP step on that
  // step's gradient: the naive per-matrix exact SVD loop, the batched exact SVD screened by
  // eigvalsh (what method denoise uses with diagnostics on) or by a Cholesky certificate (what
  // it uses otherwise), the batched randomized top-k SVD.
  std::vector<size_t> blocks;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].second.dim() == 2 && !denoise::excluded_by_default(params[i].first))
      blocks.push_back(i);
  const double sigma_e = dp.sigma * dp.clip_norm / static_cast<double>(b.batch);
  constexpr size_t kDenoiseWays = 4;
  const char* const way_names[kDenoiseWays] = {"naive", "batched", "batched_cholesky",
                                               "randomized"};
  std::array<std::vector<double>, kDenoiseWays> tdn;
  std::vector<int64_t> denoised_blocks;  // per timed step (the batched run's decisions)
  auto time_denoise = [&] {
    std::vector<torch::Tensor> ys;
    for (size_t i : blocks) ys.push_back(last_grad[i]);
    const std::vector<double> sig(ys.size(), sigma_e);
    denoise::Options exact, chol, rnd;
    chol.screen = denoise::Screen::kCholesky;
    rnd.svd = denoise::Svd::kRandomized;
    for (size_t k = 0; k < kDenoiseWays; ++k) {
      std::vector<denoise::Outcome> outs;
      auto t0 = Clock::now();
      if (k == 0)
        for (const auto& y : ys) denoise::denoise_matrix(y, sigma_e, exact);
      else
        denoise::denoise_batched(ys, sig,
                                 k == 1   ? exact
                                 : k == 2 ? chol
                                          : rnd,
                                 k == 1 ? &outs : nullptr);
      sync();
      if (k == 1) {
        int64_t c = 0;
        for (const auto& oc : outs) c += oc.denoised;
        denoised_blocks.push_back(c);
      }
      tdn[static_cast<size_t>(k)].push_back(
          std::chrono::duration<double>(Clock::now() - t0).count());
    }
  };
  DPFT_CHECK_AS(ConfigError, !b.denoise || !blocks.empty(),
                "--denoise: no trainable 2-D block outside embeddings and heads to denoise");
  np_step(), dp_step();  // warm-up
  if (b.denoise) time_denoise(), tdn = {}, denoised_blocks.clear();
  if (b.dp_sft_k > 0) sft_step();
  std::vector<double> tn, td, ts;
  for (int i = 0; i < b.reps; ++i) {
    tn.push_back(np_step()), td.push_back(dp_step());
    if (b.dp_sft_k > 0) ts.push_back(sft_step());
    if (b.denoise) time_denoise();
  }
  double n = bench_median(tn), d_step = bench_median(td);
  double tokens = static_cast<double>(b.batch * seq);
  double fwd = forward_flops_per_token(m, seq) * tokens;
  // Backward: activation gradients (= forward) always; weight gradients (= forward's share of
  // the trainable matrices) only for full fine-tuning.
  double np_flops = fwd * (b.peft == "full" ? 3.0 : 2.0);
  double gemm = sgemm_gflops(dev);
  std::string common = fmt::format(
      "bench train --arch {} --preset {} --vocab {} --batch {} --seq {} --micro {} "
      "--peft {} --r {} --grad-mode {} --reps {} --threads {} --dtype {} --device {} "
      "--noise-draw {} --noise-mode {} --quiet",
      b.arch, b.preset, b.vocab, b.batch, seq, micro, b.peft, b.r, b.grad_mode,
      std::max(1, b.reps / 2), torch_threads(), b.dtype, b.device, b.noise_draw, b.noise_mode);
  for (auto& t : b.targets) common += " --targets " + t;
  nlohmann::json mem_np = run_child(common + " --only np"),
                 mem_dp = run_child(common + " --only dp");
  nlohmann::json out = {
      {"model", fmt::format("{} {} (vocab {})", b.arch, b.preset, c.vocab_size)},
      {"peft", b.peft},
      {"trainable_parameters", model::count_parameters(m, true)},
      {"batch", b.batch},
      {"seq", seq},
      {"micro_batch", micro},
      {"threads", torch_threads()},
      {"dtype", b.dtype},
      {"device", b.device},
      {"grad_mode", b.grad_mode},
      {"noise_draw", noise.draws_on(dev) ? "device" : "host"},
      {"noise_mode", b.noise_mode},
      {"nonprivate_step_s", n},
      {"dp_step_s", d_step},
      {"time_ratio", d_step / n},
      {"per_sample_grad_share_of_dp_step", psg_share},
      {"noise_share_of_dp_step", noise_share},
      {"nonprivate_gflops", np_flops / n / 1e9},
      {"sgemm_gflops", gemm},
      {"nonprivate_peak_rss_mb", mem_np["peak_rss_mb"]},
      {"dp_peak_rss_mb", mem_dp["peak_rss_mb"]},
      {"memory_ratio", mem_dp["peak_rss_mb"].get<double>() / mem_np["peak_rss_mb"].get<double>()}};
  if (b.dp_sft_k > 0) {
    // Building P: k trajectory rows flat(Theta) written (Alg. 1 line 13: flattening to a float32
    // host vector and one safetensors file each), then the Gram-route SVD of the k x d matrix.
    nlohmann::json bf16_effect;
    if (P32.defined()) {  // what bfloat16 storage does to P and to the projected clipped sum
      std::vector<torch::Tensor> b32;
      int64_t off = 0;
      for (auto& [n, p] : params)
        b32.push_back(P32.slice(0, off, off + p.numel())), off += p.numel();
      train::BatchStats s32, sbf;
      const torch::Tensor g32 =
          train::projected_clipped_sum(psg, ds, rows, micro, 0, b32, dp, &s32).to(torch::kDouble);
      const torch::Tensor gbf =
          train::projected_clipped_sum(psg, ds, rows, micro, 0, sft_blocks, dp, &sbf)
              .to(torch::kDouble);
      // P^T P and ||P - P32||^2 block by block, in float32 (a block at a time fits a GPU).
      torch::Tensor gram =
          torch::zeros({b.dp_sft_k, b.dp_sft_k}, P32.options().dtype(torch::kDouble));
      double diff2 = 0;
      for (size_t i = 0; i < sft_blocks.size(); ++i) {
        const torch::Tensor pb = sft_blocks[i].to(torch::kFloat32);
        gram += pb.t().mm(pb).to(torch::kDouble);
        diff2 += (pb - b32[i]).pow(2).sum().item<double>();
      }
      const double orth =
          (gram - torch::eye(b.dp_sft_k, gram.options())).abs().max().item<double>();
      bf16_effect = {{"projected_sum_rel_error", ((gbf - g32).norm() / g32.norm()).item<double>()},
                     {"orthonormality_max_error", orth},
                     {"p_rel_error", std::sqrt(diff2) / P32.norm().item<double>()}};
    }
    sft_blocks.clear();  // P's memory back before the SVD's
    P32 = torch::Tensor();
    const fs::path dir = fs::temp_directory_path() / fmt::format("dpft-bench-traj-{}", getpid());
    std::vector<double> trow;
    double tsvd = 0;
    {
      project::Trajectory traj(dir, d);
      for (int64_t r = 0; r < b.dp_sft_k; ++r) {
        auto t0 = Clock::now();
        std::vector<torch::Tensor> flat;
        for (auto& [n, p] : params)
          flat.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kFloat32));
        torch::Tensor row = torch::cat(flat);
        row.add_(torch::randn({d}).mul_(1e-3));  // rows apart, as training moves them
        traj.append(row);
        trow.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      auto t0 = Clock::now();
      project::subspace_from_trajectory(traj, b.dp_sft_k, nullptr, sft_storage);
      tsvd = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    remove_tree(dir);
    const double t = bench_median(ts);
    nlohmann::json mem_sft =
        run_child(common + fmt::format(" --dp-sft {} --dp-sft-storage {} --only sft", b.dp_sft_k,
                                       b.dp_sft_storage));
    out["dp_sft"] = {{"k", b.dp_sft_k},
                     {"storage", b.dp_sft_storage},
                     {"stage2_step_s", t},
                     {"ratio_to_dp_step", t / d_step},
                     {"ratio_to_nonprivate_step", t / n},
                     {"stage2_peak_rss_mb", mem_sft["peak_rss_mb"]},
                     {"trajectory_row_s", bench_median(trow)},
                     {"svd_s", tsvd}};
    if (!bf16_effect.is_null()) out["dp_sft"]["bfloat16_effect"] = bf16_effect;
  }
  if (b.denoise) {
    for (size_t k = 0; k < kDenoiseWays; ++k) {
      const double t = bench_median(tdn[k]);
      out["denoise"][way_names[k]] = {{"seconds", t}, {"overhead_of_dp_step", t / d_step}};
    }
    out["denoise"]["blocks"] = blocks.size();
    out["denoise"]["denoised_blocks_per_step"] = denoised_blocks;
  }
  if (encoder) {  // classification evaluation throughput: no-grad forward + metrics
    std::vector<double> te;
    for (int i = 0; i <= b.reps; ++i) {
      auto t0 = Clock::now();
      eval::evaluate_lm(m, ds, micro, 0, 0);
      sync();
      if (i > 0) te.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    out["eval_examples_per_s"] = static_cast<double>(b.batch) / bench_median(te);
  }
  if (b.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout
      << fmt::format(
             "train step, {} {} (vocab {}), {} fine-tuning ({} trainable), batch {} x {} tokens, "
             "micro-batch {}, {} threads, {} on {}, noise drawn on the {}\n",
             b.arch, b.preset, c.vocab_size, b.peft, model::count_parameters(m, true), b.batch, seq,
             micro, torch_threads(), b.dtype, b.device, noise.draws_on(dev) ? "device" : "host")
      << fmt::format(
             "  non-private: {:8.3f} s/step  ({:.1f} GFLOP/s model FLOPs; sgemm {:.1f} GFLOP/s -> "
             "{:.0f}%)\n",
             n, np_flops / n / 1e9, gemm, 100 * np_flops / n / 1e9 / gemm)
      << fmt::format("  DP-SGD:      {:8.3f} s/step  ratio {:.2f}x\n", d_step, d_step / n)
      << fmt::format("  peak RSS:    non-private {:.0f} MB, DP-SGD {:.0f} MB, ratio {:.2f}x\n",
                     mem_np["peak_rss_mb"].get<double>(), mem_dp["peak_rss_mb"].get<double>(),
                     out["memory_ratio"].get<double>());
  if (b.denoise) {
    std::cout << fmt::format("  denoise ({} blocks, denoised per step: {}) after the DP-SGD step:",
                             blocks.size(), fmt::join(denoised_blocks, " "));
    for (const char* k : way_names)
      std::cout << fmt::format(" {} {:.3f} s ({:.2f}%)", k,
                               out["denoise"][k]["seconds"].get<double>(),
                               100 * out["denoise"][k]["overhead_of_dp_step"].get<double>());
    std::cout << "\n";
  }
  if (b.dp_sft_k > 0) {
    const auto& j = out["dp_sft"];
    std::cout << fmt::format(
        "  DP-SFT stage 2 (k {}, P in {}): {:8.3f} s/step  {:.2f}x DP-SGD, {:.2f}x non-private; "
        "peak RSS {:.0f} MB\n  building P: {:.3f} s per trajectory row, Gram-route SVD of {} "
        "rows {:.3f} s\n",
        b.dp_sft_k, b.dp_sft_storage, j["stage2_step_s"].get<double>(),
        j["ratio_to_dp_step"].get<double>(), j["ratio_to_nonprivate_step"].get<double>(),
        j["stage2_peak_rss_mb"].get<double>(), j["trajectory_row_s"].get<double>(), b.dp_sft_k,
        j["svd_s"].get<double>());
    if (j.contains("bfloat16_effect"))
      std::cout << fmt::format(
          "  bfloat16 P against float32 P: relative error of P {:.2e}, of the projected clipped "
          "sum {:.2e}; max |P^T P - I| {:.2e}\n",
          j["bfloat16_effect"]["p_rel_error"].get<double>(),
          j["bfloat16_effect"]["projected_sum_rel_error"].get<double>(),
          j["bfloat16_effect"]["orthonormality_max_error"].get<double>());
  }
  if (encoder)
    std::cout << fmt::format("  classification eval: {:.1f} examples/s (micro-batch {})\n",
                             out["eval_examples_per_s"].get<double>(), micro);
  return 0;
}

}  // namespace

void register_bench_train(CLI::App* bench, CliContext& ctx) {
  auto o = std::make_shared<TrainBench>();
  CLI::App* s = bench->add_subcommand(
      "train", "DP-SGD step time and memory vs a non-private step (one process)");
  s->add_option(
       "--arch", o->arch,
       "gpt2 | llama | qwen2 | qwen3 | bert | roberta | bart (encoders: a 2-class classifier, "
       "LoRA trains the head too; bart: --seq source and --seq target tokens)")
      ->capture_default_str();
  s->add_option("--preset", o->preset, "model preset (docs/models.md)")->capture_default_str();
  s->add_option("--vocab", o->vocab, "vocabulary size")->capture_default_str();
  s->add_option("--batch", o->batch, "sequences per logical batch")->capture_default_str();
  s->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  s->add_option("--micro", o->micro, "physical micro-batch (0 = the whole batch)")
      ->capture_default_str();
  s->add_option("--peft", o->peft, "lora | full")->capture_default_str();
  s->add_option("--r", o->r, "LoRA rank")->capture_default_str();
  s->add_option("--targets", o->targets,
                "modules to train (default: c_attn / q_proj,v_proj for LoRA, all for full)");
  s->add_option("--grad-mode", o->grad_mode, "per-sample norms: auto | materialize | ghost")
      ->capture_default_str();
  s->add_option("--reps", o->reps, "timed repetitions of each step (medians reported)")
      ->capture_default_str();
  s->add_option("--dtype", o->dtype, "model dtype, as model.dtype (sums and noise stay float32)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  s->add_option("--device", o->device, "cpu | cuda | cuda:N (peak RSS is host memory only)")
      ->capture_default_str();
  s->add_option("--noise-draw", o->noise_draw,
                "where the noise is drawn, as privacy.noise_draw: auto (the GPU for cuda) | host "
                "| device")
      ->check(CLI::IsMember({"auto", "host", "device"}))
      ->capture_default_str();
  s->add_option("--noise-mode", o->noise_mode, kBenchNoiseModeHelp)
      ->check(CLI::IsMember({"keyed", "seeded", "os"}))
      ->capture_default_str();
  s->add_option("--only", o->only, "internal: run one kind (np | dp) and print its peak RSS");
  s->add_flag("--json", o->json, "print JSON");
  s->add_flag("--denoise", o->denoise,
              "also time method denoise's post-processing of each DP step's gradient (naive "
              "per-matrix SVD, batched SVD, randomized top-k SVD) as a share of the step");
  s->add_option("--dp-sft", o->dp_sft_k,
                "also time a DP-SFT stage-2 step (P^T g_i clipped in R^k, noise, P g) on a "
                "random orthonormal P with this many columns, and building P (trajectory rows, "
                "Gram-route SVD); 0 = off")
      ->capture_default_str();
  s->add_option("--dp-sft-storage", o->dp_sft_storage, "P's storage with --dp-sft")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  s->callback([o, &ctx] { ctx.action = [o] { return bench_train(*o); }; });
}

}  // namespace dpft
