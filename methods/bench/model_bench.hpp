// `dpft bench decode` and `dpft bench forward`: model-speed benchmarks on random-init presets
// (no checkpoint or tokenizer needed). Results belong in docs/BENCHMARKS.md.
//   decode   per-token time with the KV cache at positions 32 and 512 (flat is the goal), and
//            cached vs recomputing the prefix at position 256
//   forward  forward throughput (tokens/s) of a preset next to the measured sgemm rate
//   generate batched sampling through generate() (CTCL's settings: top-p 0.95, repetition
//            penalty 1.5), tokens/s with the KV cache against recomputing every prefix; any
//            architecture, an encoder-decoder (bart) with its encoder output computed once
// Each prints its results (the CLI, cli/cmd_bench_model.cpp, parses the options) and returns 0.
#pragma once
#include <cstdint>
#include <string>

namespace dpft::bench {

struct GenerateBench {
  std::string arch = "bart", preset = "tiny", device = "cpu";
  int64_t vocab = 50265, batch = 16, prompt = 32, new_tokens = 32;
  int reps = 3;
  bool json = false, greedy = false;
};

int bench_decode(const std::string& arch, const std::string& preset, int64_t vocab, int64_t steps);
int bench_forward(const std::string& arch, const std::string& preset, int64_t vocab, int64_t batch,
                  int64_t seq, int reps);
int bench_generate(const GenerateBench& b);

}  // namespace dpft::bench
