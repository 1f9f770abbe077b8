// Shared pieces of the benchmarks (`dpft bench ...`: cli/cmd_bench_model.cpp, methods/bench/
// train_bench.cpp, methods/bench/pe_bench.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/transformer.hpp"
#include "core/privacy/mechanism.hpp"

namespace dpft {

using BenchClock = std::chrono::steady_clock;
// Seconds since t0.
inline double bench_seconds(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

// Measured fp32 matmul rate on `dev` (1024^3 sgemm on the CPU, 4096^3 on a GPU; best of 5),
// GFLOP/s: the yardstick for a model's FLOP rate on the same device.
double sgemm_gflops(const torch::Device& dev);
// Forward matmul FLOPs per token of `m` at sequence length `seq`: 2 x (linear weights + tied
// lm_head) + attention scores and mixing (4 x seq/2 x heads x head_dim per layer).
double forward_flops_per_token(model::CausalLM& m, int64_t seq);
// The noise a benchmark draws, as a run in noise mode `mode` would (keyed | seeded | os; the
// spelling of privacy's NoiseMode): keyed by a fresh key, seeded by 0, or the OS CSPRNG.
// A benchmark's mechanisms: that randomness, a scratch ledger without a budget and a plan of
// `per_step` releases without bound.
std::unique_ptr<privacy::Mechanisms> bench_mechanisms(const std::string& mode,
                                                      const privacy::Release& per_step);
// The --noise-mode option's help text.
inline constexpr const char* kBenchNoiseModeHelp =
    "noise bits as a run draws them: keyed (a run's default: ChaCha20 of a secret key) | seeded "
    "(privacy.noise_seed) | os (privacy.secure_noise)";
// Median (upper median for an even count); 0 for none.
double bench_median(std::vector<double> v);
// Runs this executable with `args` (a memory child: peak RSS is per process); returns the JSON
// object it prints last.
nlohmann::json run_child(const std::string& args);

}  // namespace dpft
