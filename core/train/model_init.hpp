// `dpft model init` and `dpft model rehead` as functions (cli/cmd_model_lm.cpp is their CLI),
// for whatever makes a model to train (dpft eval-synthetic's downstream language model and
// classifier: methods/synthetic_eval).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dpft {

struct ModelInitOptions {
  std::string arch, preset, tokenizer, out, dtype = "float32", family, head = "none";
  std::vector<std::string> labels;
  uint64_t seed = 0;
};

struct ModelInitResult {
  int64_t parameters = 0, vocab_size = 0;
  int tokenizer_files = 0;
};

// Writes a random-init HF-format checkpoint (config, weights, the tokenizer's files) to o.out.
// ConfigError / InputError as `dpft model init` reports them.
ModelInitResult init_model(const ModelInitOptions& o);

// `dpft model rehead`: the encoder checkpoint o.from with head o.head (none | classification |
// mlm | causal; labels for classification), body copied, the new head seeded, written to o.out.
struct ReheadOptions {
  std::string from, out, head, dtype = "float32";
  std::vector<std::string> labels;
  uint64_t seed = 0;
};
struct ReheadResult {
  int64_t copied = 0;
  std::vector<std::string> fresh, dropped;  // parameters newly initialised / not carried over
  int tokenizer_files = 0;
};
ReheadResult rehead_model(const ReheadOptions& o);

}  // namespace dpft
