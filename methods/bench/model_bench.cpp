#include "methods/bench/model_bench.hpp"

#include <fmt/format.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <regex>

#include "core/generate/generate.hpp"
#include "core/model/presets.hpp"
#include "core/model/transformer.hpp"
#include "core/util/error.hpp"
#include "core/util/system.hpp"
#include "methods/bench/bench_common.hpp"

namespace dpft::bench {

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// ms per generated token, decoding `steps` tokens after a `prefix`-token prompt.
double decode_ms(model::CausalLMImpl& m, int64_t prefix, int64_t steps, bool cached) {
  torch::NoGradGuard ng;
  int64_t V = m.config().vocab_size;
  torch::Tensor ids = torch::randint(V, {1, prefix}, torch::kInt64);
  model::KVCache cache;
  torch::Tensor logits = m.forward(ids, torch::Tensor(), cached ? &cache : nullptr);
  auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    torch::Tensor next = logits.select(1, logits.size(1) - 1).argmax(-1).unsqueeze(1);
    if (cached) {
      logits = m.forward(next, torch::Tensor(), &cache);
    } else {
      ids = torch::cat({ids, next}, 1);
      logits = m.forward(ids, torch::Tensor(), nullptr);
    }
  }
  return 1000 * secs(t0) / static_cast<double>(steps);
}

}  // namespace

int bench_decode(const std::string& arch, const std::string& preset, int64_t vocab, int64_t steps) {
  model::ModelConfig c = model::preset_config(arch, preset, vocab);
  c.max_position = std::max<int64_t>(c.max_position, 1024);
  model::CausalLM m = model::make_causal_lm(c, 0);
  m->eval();
  BlasThreadsGuard blas(1);    // as generate() decodes
  decode_ms(*m, 16, 4, true);  // warm-up
  double at32 = decode_ms(*m, 32, steps, true), at512 = decode_ms(*m, 512, steps, true);
  double cached256 = decode_ms(*m, 256, steps, true),
         recompute256 = decode_ms(*m, 256, steps, false);
  std::cout << fmt::format("decode {} {} (vocab {}), {} threads, {} steps each\n", arch, preset,
                           vocab, torch_threads(), steps)
            << fmt::format("  cached, position 32:   {:8.3f} ms/token\n", at32)
            << fmt::format("  cached, position 512:  {:8.3f} ms/token   (ratio 512/32: {:.2f})\n",
                           at512, at512 / at32)
            << fmt::format("  cached, position 256:  {:8.3f} ms/token\n", cached256)
            << fmt::format(
                   "  recompute, pos. 256:   {:8.3f} ms/token   (speed-up of the cache: {:.1f}x)\n",
                   recompute256, recompute256 / cached256);
  return 0;
}

int bench_forward(const std::string& arch, const std::string& preset, int64_t vocab, int64_t batch,
                  int64_t seq, int reps) {
  torch::NoGradGuard ng;
  double gemm_gflops = sgemm_gflops(torch::kCPU);

  model::ModelConfig c = model::preset_config(arch, preset, vocab);
  model::CausalLM m = model::make_causal_lm(c, 0);
  m->eval();
  seq = std::min(seq, c.max_position);
  torch::Tensor ids = torch::randint(vocab, {batch, seq}, torch::kInt64);
  m->forward(ids, torch::Tensor());
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) m->forward(ids, torch::Tensor());
  double s = secs(t0) / reps;
  double tokens = static_cast<double>(batch * seq);
  double flops_tok = forward_flops_per_token(m, seq);
  std::cout << fmt::format("forward {} {} (vocab {}), batch {} x {} tokens, {} threads\n", arch,
                           preset, vocab, batch, seq, torch_threads())
            << fmt::format(
                   "  {:.0f} tokens/s ({:.1f} ms per batch), {:.1f} GFLOP/s of matmul work\n",
                   tokens / s, 1000 * s, flops_tok * tokens / s / 1e9)
            << fmt::format("  sgemm 1024^3: {:.1f} GFLOP/s  -> model at {:.0f}% of sgemm rate\n",
                           gemm_gflops, 100 * flops_tok * tokens / s / 1e9 / gemm_gflops);
  return 0;
}

int bench_generate(const GenerateBench& b) {
  DPFT_CHECK_AS(ConfigError, b.batch >= 1 && b.prompt >= 1 && b.new_tokens >= 1 && b.reps >= 1,
                "--batch, --prompt, --new and --reps must be >= 1");
  static const std::regex device_re("cpu|cuda(:[0-9]+)?");
  DPFT_CHECK_AS(ConfigError, std::regex_match(b.device, device_re),
                "--device {}: use cpu, cuda or cuda:N", b.device);
  DPFT_CHECK_AS(ConfigError, b.device == "cpu" || cuda_available(),
                "--device {}: this dpft's LibTorch has no CUDA or sees no GPU", b.device);
  model::ModelConfig c = model::preset_config(b.arch, b.preset, b.vocab);
  const bool seq2seq = c.is_seq2seq();
  DPFT_CHECK_AS(ConfigError, !c.is_encoder(), "--arch {}: an encoder does not generate", b.arch);
  // Room for the prompt (a decoder-only model) and the new tokens (both) in the position table.
  c.max_position = std::max<int64_t>(c.max_position, b.prompt + b.new_tokens + 2);
  model::CausalLM m = model::make_causal_lm(c, 0);
  const torch::Device dev(b.device);
  m->to(dev);
  m->eval();
  torch::manual_seed(0);
  // Random prompts (sources for bart) of --prompt tokens, ids clear of the special ones.
  torch::Tensor ids = torch::randint(4, c.vocab_size, {b.batch, b.prompt}, torch::kInt64);
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(b.batch));
  for (int64_t i = 0; i < b.batch; ++i) {
    torch::Tensor row = ids[i].contiguous();
    prompts[static_cast<size_t>(i)].assign(row.data_ptr<int64_t>(),
                                           row.data_ptr<int64_t>() + b.prompt);
  }
  generate::GenerationOptions o;
  o.do_sample = !b.greedy;  // --greedy: argmax, no filtering or penalty (the draw's cost apart)
  o.top_p = b.greedy ? 1.0 : 0.95;
  o.repetition_penalty = b.greedy ? 1.0 : 1.5;
  o.max_new_tokens = b.new_tokens;  // no stop id: every row runs to the end
  o.pad_id = c.pad_token_id.value_or(0);
  auto timed = [&](bool cached, int64_t new_tokens) {
    o.use_cache = cached;
    o.max_new_tokens = new_tokens;
    auto t0 = Clock::now();
    auto g = generate::generate(*m, prompts, o);
    if (dev.is_cuda()) torch::cuda::synchronize();
    const double s = secs(t0);
    int64_t n = 0;
    for (const auto& r : g) n += static_cast<int64_t>(r.tokens.size());
    return static_cast<double>(n) / s;  // generated tokens per second
  };
  timed(true, 2);  // warm-up
  std::vector<double> cached, recomputed;
  for (int i = 0; i < b.reps; ++i) {
    o.seed = static_cast<uint64_t>(i);
    cached.push_back(timed(true, b.new_tokens));
    recomputed.push_back(timed(false, b.new_tokens));
  }
  const double tc = bench_median(cached), tr = bench_median(recomputed);
  nlohmann::json out = {{"model", fmt::format("{} {} (vocab {})", b.arch, b.preset, c.vocab_size)},
                        {"device", b.device},
                        {"threads", torch_threads()},
                        {"batch", b.batch},
                        {"prompt_tokens", b.prompt},
                        {"new_tokens", b.new_tokens},
                        {"decoding", b.greedy ? "greedy" : "top-p 0.95, repetition penalty 1.5"},
                        {"cached_tokens_per_s", tc},
                        {"recomputed_tokens_per_s", tr},
                        {"cache_speedup", tc / tr}};
  if (b.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
                   "generate {} {} (vocab {}) on {}, {} threads: batch {}, {} {} tokens, {} new "
                   "({}), median of {}\n",
                   b.arch, b.preset, c.vocab_size, b.device, torch_threads(), b.batch, b.prompt,
                   seq2seq ? "source" : "prompt", b.new_tokens,
                   b.greedy ? "greedy" : "top-p 0.95, repetition penalty 1.5", b.reps)
            << fmt::format("  KV cache:    {:10.1f} tokens/s\n", tc)
            << fmt::format("  recomputing: {:10.1f} tokens/s   (speed-up of the cache: {:.2f}x)\n",
                           tr, tc / tr);
  return 0;
}

}  // namespace dpft::bench
