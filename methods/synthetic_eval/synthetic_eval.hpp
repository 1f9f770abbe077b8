// The synthetic-data evaluation of `dpft eval-synthetic` (cli/cmd_eval_synthetic.cpp is its
// CLI): how close a synthetic text set is to the real texts, as the CTCL and Aug-PE papers
// measure it on sentence embeddings: MAUVE, FID and k-NN precision / recall
// (core/eval/distribution.hpp), both files embedded with the same encoder (core/eval/embed.hpp).
// With lm.on, also the generative tasks' downstream measure (Aug-PE's run_clm, CTCL Table 3): a
// causal BERT-shaped language model trained from scratch on the synthetic texts (a non-private
// run of method sgd: training on DP synthetic data is post-processing), its next-token accuracy
// and perplexity on the real texts; with clf.on, a classifier fine-tuned on the labelled
// synthetic texts, its accuracy on the labelled real ones. An evaluation against the real texts
// as given, not a DP release: the result says so.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/eval/distribution.hpp"

namespace dpft {

struct LmOptions {  // --lm: the downstream language model
  bool on = false;
  std::string tokenizer, preset = "mini";
  int64_t steps = 200, batch = 64, micro = 16, max_length = 128;
  double lr = 3e-4;
  uint64_t seed = 0;
};

struct ClassifierOptions {  // --classify: the downstream classifier
  bool on = false;
  std::string from, label_column = "label", peft = "full";
  std::vector<std::string> labels;
  int64_t steps = 100, batch = 32, micro = 16, max_length = 128;
  double lr = 5e-4;
  uint64_t seed = 0;
};

struct EvalSyntheticOptions {  // the command's options
  std::string real, synthetic, embedder, out, real_column = "text", synthetic_column = "text",
                                              format = "auto", device = "cpu";
  int64_t batch = 32, k = 10, max_real = 0, max_synthetic = 0;
  size_t max_length = 0;
  eval::MauveOptions mauve;
  LmOptions lm;
  ClassifierOptions clf;
  std::string work;                // --lm / --classify: where their models and runs go
  std::string run, name = "main";  // --run: a finished run's synthetic set, result into it
  int64_t subset = 0;              // --run: its synthetic_n<N>.jsonl instead (ctcl subsets)
  bool keep_work = false;
  bool json = false;
};

// Scores o.synthetic against o.real (with o.run: the run's synthetic/synthetic.jsonl, or its
// synthetic_n<subset>.jsonl, and the result recorded in its metrics.json under
// synthetic_eval.<name>; `name_given`: o.name was chosen, not defaulted). Returns the result:
// {real, synthetic, embedder, mauve, fid, precision_recall, note[, downstream_lm,
// downstream_classifier]}; also written to o.out when set. ConfigError / InputError for bad
// options or files, before anything is embedded.
nlohmann::json evaluate_synthetic(EvalSyntheticOptions o, bool name_given);

}  // namespace dpft
