// `dpft bench train`: the cost of privacy per training step, measured in one process on one
// fixed batch of random tokens: a non-private step (forward + autograd backward of the mean
// loss) and a DP-SGD step (per-sample gradients, clipping, the clipped sum, noise), interleaved
// over --reps repetitions (medians reported, so machine noise hits both alike). Peak memory of
// each kind is measured in a child process of its own (`--only np|dp|sft`), since peak RSS is
// per process. An encoder-decoder (--arch bart) trains on pairs of random sources and targets of
// --seq tokens each (the model FLOPs count a source and a target token as one token's worth of
// the whole model). --denoise adds method denoise's post-processing of each DP step's gradient
// (paper 003); --dp-sft K a DP-SFT stage-2 step (paper 002, Alg. 2: per-sample P^T g_i,
// clipping in R^k, noise, P g~^s) on a random orthonormal P of k columns, interleaved with the
// other two, and what building P costs (one trajectory row written, the Gram-route SVD of k
// rows); --unit-rows K a user-level DP-SGD step (privacy.unit user: the same rows as users of K
// rows each, each user's summed gradient clipped, train::unit_clipped_sum), interleaved too;
// --per-layer the DP-SGD step with privacy.clipping_style per_layer (each trainable parameter
// clipped to C / sqrt(P): per-parameter norms and weights, train::clip_groups), interleaved.
// Results belong in docs/BENCHMARKS.md. The CLI (cli/cmd_bench_train.cpp) parses the
// options and prints.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dpft::bench {

struct TrainBench {
  std::string arch = "gpt2", preset = "small", peft = "lora", grad_mode = "auto", only;
  std::string dtype = "float32", device = "cpu", dp_sft_storage = "float32", noise_draw = "auto",
              noise_mode = "keyed";
  std::vector<std::string> targets;
  int64_t vocab = 50257, batch = 32, seq = 128, micro = 0, r = 8, dp_sft_k = 0;
  int64_t unit_rows = 0;  // --unit-rows K: also a user-level DP step, K rows per user
  int reps = 5;
  bool json = false, denoise = false, per_layer = false;
};

// The measurements (with `only`: {only, peak_rss_mb} of that kind's steps, for the parent).
nlohmann::json train_bench(const TrainBench& b);
// The measurements as the CLI prints them without --json.
std::string train_bench_text(const TrainBench& b, const nlohmann::json& out);

}  // namespace dpft::bench
