// The synthetic sets of the PE-SGD paper's methods (Zou et al., ICLR 2026): the options every
// projection method and SFT+DP-SGD share (the method block's synthetic keys), the generator
// (the model being trained, Alg. 1, or a frozen one, Alg. 2), SynDataGeneration's seeds per step,
// D as tokenised examples formatted like the private data, its CSV copies in the run directory,
// and the non-private SFT on D of Alg. 1 line 2. D is made from the model alone (and, when it
// evolves, from SampleSelection on the DP coefficients z): post-processing, never a release.
#pragma once
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/grad/per_sample.hpp"
#include "core/run/run_context.hpp"
#include "core/synth/synthetic.hpp"
#include "core/train/setup.hpp"

namespace dpft {
class Fields;
}

namespace dpft::pe_sgd {

// The method-block keys every projection method shares.
struct SyntheticOptions {
  int64_t size = 200;           // N: synthetic samples per iteration
  int64_t fold = 1;             // L (0 = inf): each seed gets L - 1 variations
  bool evolve = false;          // regenerate D every step (PE-SGD); false: D fixed
  std::string prompts;          // prompt file (experiments/prompts/*.yaml)
  synth::PromptStyle style =
      synth::PromptStyle::kAuto;  // auto (chat when data.chat_format != none) | plain | chat
  std::string generator_model;  // "" = the model being trained; path = frozen generator (Alg. 2)
  int64_t max_new_tokens = 128;
  int64_t min_new_tokens = 0;  // no stop token (eos) before this many tokens
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  double repetition_penalty = 1.0;
  int64_t gen_batch_size = 32;
  int64_t sft_epochs = 0;  // non-private SFT epochs on the initial D (Alg. 1 line 2)
  double sft_lr = 0;       // 0 = train.lr
  int64_t sft_batch_size = 16;
  bool save_synthetic = true;  // write synthetic/iter_XXXX.csv whenever D changes
  bool diagnostics = false;    // per-step analysis of non-private quantities (off by default)
  int64_t diagnostics_k = 50;  // basis size for principal angles / overlap
  grad::GradOptions grad;

  // The keys (`evolution`: with `evolve`, PE-SGD's), read or written (Fields::writer).
  void configure(Fields& f, bool evolution);
};

// The generation settings of a run: style (auto: chat when data.chat_format is not none), the
// chat format of the prompts (data.chat_format for the trained model; the tokenizer's own for a
// frozen generator or chat_format auto), sampling options.
synth::GeneratorOptions generator_options(const Spec& spec, const SyntheticOptions& so);

// The generator and what it owns (a frozen generator's model and tokenizer).
struct Generator {
  model::CausalLM model;
  std::unique_ptr<tok::Tokenizer> own_tok;
  std::unique_ptr<synth::SyntheticGenerator> gen;
  synth::PromptStyle style = synth::PromptStyle::kPlain;
};
std::unique_ptr<Generator> make_generator(const Spec& spec, train::TrainInputs& in,
                                          const SyntheticOptions& so);

// The seed of SynDataGeneration for the set made for step `step` (0: the initial set).
uint64_t generation_seed(const Spec& spec, int64_t step);

// Tokenised examples for synthetic texts, formatted like the private data: plain text; with
// data.train.prompt, pairs with that prompt; with data.train.prompt_column, pairs with `prompt`
// (the zero-shot prompt).
lm::LmDataset synthetic_dataset(const std::vector<std::string>& texts, const std::string& prompt,
                                const Spec& spec, const tok::Tokenizer& tok);

// <run>/synthetic/iter_<iter>.csv (one `text` column), written atomically.
void save_synthetic_csv(RunDir& dir, const std::vector<std::string>& texts, int64_t iter);

// Alg. 1 line 2: non-private SFT of the trainable parameters on D, so.sft_epochs epochs of
// shuffled mini-batches (mean per-sample loss), the run's optimizer kind at a constant lr.
void synthetic_sft_epochs(model::CausalLM& m, const lm::LmDataset& ds, const SyntheticOptions& so,
                          const Spec& spec, int64_t pad_id);

// SFT+DP-SGD's first stage (PE-SGD paper, App. D.8, Table 9): generate D with the generator
// from the untrained model (written to synthetic/iter_0001.csv), then so.sft_epochs of
// non-private SFT on it. Returns the "synthetic" metrics block.
nlohmann::json synthetic_sft(RunContext& ctx, train::TrainInputs& in, const SyntheticOptions& so);

// {samples, tokens, seconds, tokens_per_s} of one generation API.
nlohmann::json gen_stats_json(const synth::GenerationStats& s);

}  // namespace dpft::pe_sgd
