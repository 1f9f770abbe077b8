#include "methods/bench/bench_common.hpp"

#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>

#include "core/privacy/ledger.hpp"
#include "core/util/enum_names.hpp"
#include "core/util/error.hpp"

namespace dpft {

std::unique_ptr<privacy::Mechanisms> bench_mechanisms(const std::string& mode,
                                                      const privacy::Release& per_step) {
  privacy::Release unbounded = per_step;
  unbounded.count = int64_t{1} << 40;
  return std::make_unique<privacy::Mechanisms>(privacy::LedgerOptions{},
                                               privacy::PrivateRandomness::for_benchmark(enum_value(
                                                   mode, privacy::kNoiseModeNames, "--noise-mode")),
                                               std::vector<privacy::Release>{unbounded});
}

double sgemm_gflops(const torch::Device& dev) {
  torch::NoGradGuard ng;
  // 1024^3 on the CPU; 4096^3 on a GPU, where a 1024^3 product is mostly launch overhead.
  const int64_t n = dev.is_cuda() ? 4096 : 1024;
  const auto opt = torch::TensorOptions().device(dev);
  torch::Tensor a = torch::randn({n, n}, opt), b = torch::randn({n, n}, opt);
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize();
  };
  torch::mm(a, b);
  sync();
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = BenchClock::now();
    torch::mm(a, b);
    sync();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / bench_seconds(t0) / 1e9);
  }
  return best;
}

double forward_flops_per_token(model::CausalLM& m, int64_t seq) {
  const model::ModelConfig& c = m->config();
  int64_t lin = 0;
  for (auto& [n, l] : m->linears()) lin += l->weight.numel();
  // The tied head projects onto the vocabulary; a sequence classifier has no such head.
  const bool head = !c.is_encoder() || c.head == model::EncoderHead::kMaskedLM ||
                    c.head == model::EncoderHead::kCausalLM;
  return 2.0 * static_cast<double>(
                   lin + (c.tie_word_embeddings && head ? c.vocab_size * c.hidden_size : 0)) +
         4.0 * static_cast<double>(c.num_layers) * (static_cast<double>(seq) / 2.0) * c.num_heads *
             c.head_dim;
}

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

}  // namespace dpft
