#include "core/synth/synthetic.hpp"

#include "core/dist/world.hpp"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/unicode.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"

namespace dpft::synth {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

// Generated ids can split a multi-byte character (at the length limit, or a model emitting
// an odd byte token): each ill-formed byte becomes U+FFFD so the text is valid UTF-8.
std::string valid_utf8(std::string s) {
  std::string out;
  while (!s.empty()) {
    size_t bad = tok::find_invalid_utf8(s);
    if (bad == std::string::npos) {
      out += s;
      break;
    }
    out += s.substr(0, bad);
    tok::append_utf8(out, 0xFFFD);
    s.erase(0, bad + 1);
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

PromptSet load_prompts(const std::string& path) {
  DPFT_CHECK_AS(ConfigError, !path.empty(),
                "no prompt file: set method.prompts (e.g. experiments/prompts/pubmed.yaml)");
  DPFT_CHECK_AS(
      InputError, std::filesystem::exists(path),
      "prompt file {} not found (method.prompts; shipped files are in experiments/prompts/)", path);
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("prompt file {}: {}", path, e.what()));
  }
  PromptSet p;
  for (const char* key : {"zero_shot", "one_shot"}) {
    DPFT_CHECK_AS(ConfigError, n[key] && n[key].IsScalar() && !n[key].as<std::string>().empty(),
                  "prompt file {}: `{}` must be a non-empty string", path, key);
  }
  p.zero_shot = n["zero_shot"].as<std::string>();
  p.one_shot = n["one_shot"].as<std::string>();
  if (n["tones"]) {
    DPFT_CHECK_AS(ConfigError, n["tones"].IsSequence(), "prompt file {}: `tones` must be a list",
                  path);
    for (const auto& t : n["tones"]) p.tones.push_back(t.as<std::string>());
  }
  for (const auto& kv : n) {
    std::string k = kv.first.as<std::string>();
    DPFT_CHECK_AS(ConfigError, k == "zero_shot" || k == "one_shot" || k == "tones" || k == "name",
                  "prompt file {}: unknown key `{}` (allowed: name, zero_shot, one_shot, tones)",
                  path, k);
  }
  DPFT_CHECK_AS(ConfigError, p.one_shot.find("<sample>") != std::string::npos,
                "prompt file {}: one_shot must contain <sample>", path);
  DPFT_CHECK_AS(ConfigError, p.one_shot.find("<tone>") == std::string::npos || !p.tones.empty(),
                "prompt file {}: one_shot uses <tone> but `tones` is empty", path);
  return p;
}

std::string variation_prompt(const PromptSet& p, const std::string& sample,
                             const std::string& tone) {
  std::string s = p.one_shot;
  replace_all(s, "<tone>", tone);
  replace_all(s, "<sample>", sample);  // last: a sample containing "<tone>" stays as written
  return s;
}

PromptSet with_label(const PromptSet& p, const std::string& label, const std::string& file) {
  DPFT_CHECK_AS(ConfigError, p.zero_shot.find("<label>") != std::string::npos,
                "prompt file {}: zero_shot has no <label>, so the generated texts would not "
                "depend on their class; put <label> where the class description goes",
                file);
  PromptSet out = p;
  replace_all(out.zero_shot, "<label>", label);
  replace_all(out.one_shot, "<label>", label);
  return out;
}

SyntheticGenerator::SyntheticGenerator(model::CausalLM model, const tok::Tokenizer& tok,
                                       PromptSet prompts, GeneratorOptions opts)
    : model_(std::move(model)), tok_(tok), prompts_(std::move(prompts)), opts_(std::move(opts)) {
  DPFT_CHECK(opts_.style != PromptStyle::kAuto,
             "SyntheticGenerator: the prompt style is resolved (resolve_style) before it is used");
  DPFT_CHECK_AS(ConfigError, opts_.batch_size > 0, "generation batch size must be > 0");
  if (tok_.eos_id()) opts_.gen.stop_ids.push_back(*tok_.eos_id());
  for (const char* end : {"<|im_end|>", "<|eot_id|>"})
    if (auto id = tok_.token_to_id(end); id && tok_.is_special(*id))
      opts_.gen.stop_ids.push_back(*id);
  if (tok_.pad_id())
    opts_.gen.pad_id = *tok_.pad_id();
  else if (tok_.eos_id())
    opts_.gen.pad_id = *tok_.eos_id();
}

std::vector<int64_t> SyntheticGenerator::prompt_ids(const std::string& prompt) const {
  std::vector<int64_t> row;
  if (opts_.style == PromptStyle::kChat) {
    tok::ChatPrompt cp = tok::render_chat(tok_, {{"user", prompt}}, true, opts_.chat_format);
    for (auto t : tok::encode_chat(tok_, cp).ids) row.push_back(t);
  } else {
    tok::EncodeOptions eo;
    eo.add_special = tok_.add_bos();
    for (auto t : tok_.encode(prompt, eo)) row.push_back(t);
  }
  DPFT_CHECK_AS(ConfigError, !row.empty(), "a generation prompt encodes to no tokens");
  return row;
}

std::vector<std::string> SyntheticGenerator::run(const std::vector<std::string>& prompts,
                                                 uint64_t seed, GenerationStats& stats) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> out;
  const bool was_training = model_->is_training();
  model_->eval();  // no dropout while generating
  torch::NoGradGuard ng;
  auto decode = [this](const std::vector<int64_t>& v) {
    return tok_.decode(std::vector<tok::TokenId>(v.begin(), v.end()), /*skip_special=*/true);
  };
  const bool shard = sharded_ && dist::active();
  const size_t W = shard ? static_cast<size_t>(dist::size()) : 1;
  const size_t me = shard ? static_cast<size_t>(dist::rank()) : 0;
  int64_t tokens = 0;
  out.resize(prompts.size());
  for (size_t b = 0, k = 0; b < prompts.size(); b += static_cast<size_t>(opts_.batch_size), ++k) {
    if (k % W != me) continue;  // another rank's batch
    size_t e = std::min(prompts.size(), b + static_cast<size_t>(opts_.batch_size));
    std::vector<std::vector<int64_t>> ids;
    for (size_t i = b; i < e; ++i) ids.push_back(prompt_ids(prompts[i]));
    generate::GenerationOptions g = opts_.gen;
    g.seed = seed + b;  // one stream per call, reproducible for a seed
    size_t i = b;
    for (auto& r : generate::generate(*model_, ids, g, decode)) {
      tokens += static_cast<int64_t>(r.tokens.size());
      out[i++] = trim(valid_utf8(r.text));
    }
  }
  if (shard) {  // each text was generated by one rank; the others hold "" there
    out = dist::merge_disjoint(out, "the generated texts");
    std::vector<torch::Tensor> t{torch::tensor({tokens}, torch::kInt64)};
    dist::all_reduce_sum(t, "the generated token count");
    tokens = t[0].item<int64_t>();
  }
  stats.tokens += tokens;
  if (was_training) model_->train();
  stats.samples += static_cast<int64_t>(prompts.size());
  stats.seconds += seconds_since(t0);
  return out;
}

std::vector<std::string> SyntheticGenerator::random_api(int64_t n, uint64_t seed) {
  return run(std::vector<std::string>(static_cast<size_t>(n), prompts_.zero_shot), seed,
             random_stats);
}

std::vector<std::string> SyntheticGenerator::variational_api(const std::vector<std::string>& seeds,
                                                             int64_t per_seed, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<std::string> prompts;
  for (const auto& s : seeds)
    for (int64_t k = 0; k < per_seed; ++k) {
      std::string tone;
      if (!prompts_.tones.empty())
        tone = prompts_
                   .tones[std::uniform_int_distribution<size_t>(0, prompts_.tones.size() - 1)(rng)];
      prompts.push_back(variation_prompt(prompts_, s, tone));
    }
  return run(prompts, seed, variational_stats);
}

std::vector<std::string> syn_data_generation(SyntheticGenerator& g,
                                             const std::vector<std::string>& seeds, int64_t N,
                                             int64_t L, uint64_t seed) {
  DPFT_CHECK_AS(ConfigError, N > 0 && L >= 0, "synthetic set: N must be > 0 and L >= 1 or inf");
  if (L == 0) return g.random_api(N, seed);
  std::vector<std::string> d = seeds;
  if (d.empty()) d = g.random_api((N + L - 1) / L, seed);
  std::vector<std::string> var = g.variational_api(d, L - 1, seed + 7919);
  d.insert(d.end(), var.begin(), var.end());
  return d;
}

}  // namespace dpft::synth
