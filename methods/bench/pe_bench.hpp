// `dpft bench pe-sgd`: the cost of PE-SGD's projection per step against a DP-SGD step on the
// same model and private batch (PE-SGD paper, App. D.12 / Table 11: PE-SGD computes N synthetic
// plus M~ private per-sample gradients, so the work floor is about (N + M~) / M~), interleaved
// over --reps repetitions (medians), generation excluded; then the generation throughput of
// RANDOM_API and VARIATIONAL_API (Table 12 analogue) with the shipped PubMed prompts; peak memory
// of each step kind in a child process (`--only dp|pe`). Results belong in docs/BENCHMARKS.md.
// The CLI (cli/cmd_bench_pe.cpp) parses the options and prints.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dpft::bench {

struct PeBench {
  std::string model, prompts = "experiments/prompts/pubmed.yaml", only;
  std::string noise_mode = "keyed";
  std::vector<std::string> targets = {"c_attn", "c_proj"};
  int64_t batch = 80, synthetic = 200, seq = 128, micro = 16, r = 8, gen = 20, gen_tokens = 128;
  int reps = 3;
  bool json = false;
};

// The measurements (with `only`: {only, peak_rss_mb} of that kind's steps, for the parent).
nlohmann::json pe_bench(const PeBench& b);
// The measurements as the CLI prints them without --json.
std::string pe_bench_text(const PeBench& b, const nlohmann::json& out);

}  // namespace dpft::bench
