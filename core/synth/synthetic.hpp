// Synthetic-data generation for PE-SGD (Zou et al., ICLR 2026, Alg. 1 lines 1 and 10, Alg. 3
// SynDataGeneration; prompts of Table 4, Appendix C.2; RANDOM_API / VARIATIONAL_API as named by
// Xie et al. 2024, Aug-PE).
//
//   RANDOM_API(n):          n generations from the zero-shot prompt
//   VARIATIONAL_API(x, n):  n generations from the one-shot prompt with <sample> = x and <tone>
//                           drawn uniformly from the prompt file's tone list
//   SynDataGeneration(D_seed, N, L): L = inf -> N RANDOM_API samples; else (D_seed empty ->
//                           ceil(N / L) RANDOM_API samples as seeds) each seed gets L - 1
//                           VARIATIONAL_API variations; D = seeds + variations.
// The generator is a model (the one being trained, or a frozen one: Alg. 2) with its own
// tokenizer. Prompts go to the model as a user turn in its chat format (style chat: instruct
// models, as the paper does) or as plain text (style plain: base models such as GPT-2).
//
// Prompt files are YAML: {zero_shot: "...", one_shot: "<sample>\n... <tone> ...", tones: [..]}.
// experiments/prompts/ ships the paper's pubmed, biorxiv and congressional prompts.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/generate/generate.hpp"
#include "core/model/transformer.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/util/enum_names.hpp"

namespace dpft::synth {

struct PromptSet {
  std::string zero_shot;
  std::string one_shot;  // contains <sample>; <tone> optional
  std::vector<std::string> tones;
};

// InputError if the file is missing; ConfigError (naming the file and key) if zero_shot or
// one_shot is missing/empty, one_shot lacks <sample>, or it uses <tone> with no tones.
PromptSet load_prompts(const std::string& path);

// one_shot with <sample> -> sample and <tone> -> tone (every occurrence).
std::string variation_prompt(const PromptSet& p, const std::string& sample,
                             const std::string& tone);

// The prompts of one class of a labelled private set (Aug-PE's conditional generation, e.g.
// Yelp's "Business Category: ...\nReview Stars: ..."): every "<label>" in zero_shot and one_shot
// replaced by `label` (before any sample is put in). ConfigError naming `file` when zero_shot has
// no <label>: the class would condition nothing.
PromptSet with_label(const PromptSet& p, const std::string& label, const std::string& file);

// How a prompt is given to the generator: as plain text, or as a user turn of a chat (the
// method.style of pe / aug-pe and the pe-sgd family, where auto = chat when the private data are
// chats, data.chat_format not none: resolve_style).
enum class PromptStyle { kAuto, kPlain, kChat };
inline constexpr std::array<EnumName<PromptStyle>, 3> kPromptStyleNames = {
    {{PromptStyle::kAuto, "auto"}, {PromptStyle::kPlain, "plain"}, {PromptStyle::kChat, "chat"}}};
inline const char* name_of(PromptStyle s) {
  return enum_name(s, kPromptStyleNames);
}
// auto -> chat when the private data are chats, else plain; plain and chat as they are.
inline PromptStyle resolve_style(PromptStyle s, bool data_are_chats) {
  if (s != PromptStyle::kAuto) return s;
  return data_are_chats ? PromptStyle::kChat : PromptStyle::kPlain;
}

struct GeneratorOptions {
  PromptStyle style = PromptStyle::kPlain;  // plain | chat (resolved: never auto)
  // style chat: the chat format of the prompts; nullopt = the tokenizer's own (a frozen
  // generator's). The trained model uses data.chat_format, as its private data do.
  std::optional<tok::ChatFormat> chat_format;
  generate::GenerationOptions gen;  // do_sample, temperature, top_p, max_new_tokens, ...
  int64_t batch_size = 32;          // prompts per generate() call
};

struct GenerationStats {
  int64_t samples = 0, tokens = 0;
  double seconds = 0;
};

// The two APIs of one generator model.
class SyntheticGenerator {
 public:
  SyntheticGenerator(model::CausalLM model, const tok::Tokenizer& tok, PromptSet prompts,
                     GeneratorOptions opts);
  std::vector<std::string> random_api(int64_t n, uint64_t seed);
  // per_seed variations of each seed, grouped by seed (seed 0's first).
  std::vector<std::string> variational_api(const std::vector<std::string>& seeds, int64_t per_seed,
                                           uint64_t seed);
  const PromptSet& prompts() const { return prompts_; }
  // The ids the model is prompted with: style plain = encode(prompt) (with the tokenizer's bos
  // when it adds one); style chat = the prompt as a user turn plus the generation prompt.
  std::vector<int64_t> prompt_ids(const std::string& prompt) const;
  GenerationStats random_stats, variational_stats;  // accumulated (every rank's tokens)
  // Data parallel (core/dist/world.hpp): while set, random_api and variational_api are
  // collectives: rank r generates the prompt batches k with k mod W = r (each from its own
  // seed, seed + first prompt's index, as one process would) and every rank returns all texts.
  // The same texts as one process when the ranks hold the same model. Off: this rank alone.
  void set_sharded(bool on) { sharded_ = on; }

 private:
  bool sharded_ = false;
  model::CausalLM model_;
  const tok::Tokenizer& tok_;
  PromptSet prompts_;
  GeneratorOptions opts_;
  std::vector<std::string> run(const std::vector<std::string>& prompts, uint64_t seed,
                               GenerationStats& stats);
};

// Alg. 3 SynDataGeneration. L = 0 means infinity. Returns N' texts: seeds first, then their
// variations (N' = N for L = inf; |seeds| * L otherwise, i.e. ceil(N/L) * L from scratch).
std::vector<std::string> syn_data_generation(SyntheticGenerator& g,
                                             const std::vector<std::string>& seeds, int64_t N,
                                             int64_t L, uint64_t seed);

}  // namespace dpft::synth
