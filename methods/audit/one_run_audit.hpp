// `dpft audit SPEC --canaries M`: an empirical lower bound on the epsilon of one training run of
// any method, by the one-run audit of Steinke, Nasr and Jagielski 2023 ("Privacy Auditing with
// One (1) Training Run", Algorithm 1, black-box):
//   1. m canaries, random-token sequences (distinct; printable pieces of the model's tokenizer);
//   2. S_i in {-1, +1} uniform: canary i is added to the training set iff S_i = +1;
//   3. one run of the spec's method on the private data plus the included canaries;
//   4. a score per canary (--score):
//      loss (black-box): its loss under the base model minus its loss under the trained model
//        (the base loss does not depend on S, so this is the loss score, calibrated per canary);
//      gradient (white-box, the paper's Section 6 reads the parameters): the alignment of the
//        released parameters' change with the direction one gradient step on canary i takes,
//          score_i = < theta_T - theta_0, -g_i > / ||g_i||,   g_i = grad loss_i (theta_0),
//        theta_0 the trainable parameters before training (base model and the seeded LoRA
//        initialisation: public), theta_T those of the released adapter or model;
//   5. guesses: "included" for the k+ highest scores, "excluded" for the k- lowest;
//   6. v correct out of r = k+ + k- guesses -> epsilon lower bound at the given confidence
//      (core/privacy/audit_bound.hpp, the paper's Theorem 5.2 with the run's delta).
// Unless --guesses fixes k+ = k- = K beforehand, the bound is the best over a fixed grid of K,
// each test at level beta / |grid| (Bonferroni), so the confidence holds for the maximum too
// (the paper reports the best k without that correction).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/util/enum_names.hpp"

namespace dpft::audit {

enum class AuditScore { kLoss, kGradient };
inline constexpr std::array<EnumName<AuditScore>, 2> kAuditScoreNames = {
    {{AuditScore::kLoss, "loss"}, {AuditScore::kGradient, "gradient"}}};

struct AuditOptions {
  int64_t canaries = 1000;      // m
  int64_t canary_tokens = 0;    // tokens per canary; 0: min(32, data.max_length / 2)
  // Rows of one canary: privacy.unit user makes each canary a user of this many rows (0:
  // min(4, privacy.max_examples_per_user)); 1 otherwise.
  int64_t canary_rows = 0;
  // Texts to use as canaries instead of random ones (column `text`, or a one-column file):
  // public texts of your choice, none of them in the private data; shuffled by `seed`.
  std::string canary_file;
  double confidence = 0.95;     // 1 - beta
  int64_t guesses = 0;          // K = k+ = k-; 0: the grid below with Bonferroni correction
  AuditScore score = AuditScore::kLoss;
  std::string out_dir;          // audit directory ("" = <spec.output.dir>/audit/<name>-<time>)
  std::string command_line;     // recorded in the run's manifest
};

// K values tried when AuditOptions::guesses is 0: round(f m) for f in {0.01, 0.02, 0.05, 0.1,
// 0.2, 0.5}, at least 1, at most m / 2, duplicates dropped.
std::vector<int64_t> guess_grid(int64_t m);

struct AuditResult {
  nlohmann::json report;  // what audit.json holds (schema dpft.audit/1)
  std::string dir;
  bool violation = false;  // the lower bound exceeds the epsilon the run reports
};

// Canaries by data.task (and unit):
//   lm              random-token texts of the model's tokenizer (as above)
//   classification  mislabelled examples: random-word texts (and pairs, with
//                   data.train.text_pair_column) with a label drawn uniformly from the label set;
//                   the score is the drop of the cross-entropy of that label
//   seq2seq         canary documents: random-word targets (and sources, with a prompt_column);
//                   the score is the drop of the target's loss given its source
//   pe / aug-pe     canary texts in the private file, drawn from the run's own initial
//                   population P_0 (Method::public_candidates; an included canary votes for its
//                   exact copy); the score is the cosine similarity of the nearest released
//                   synthetic text in the method's embedder's space
//   ctcl            canary documents (random-word texts, each a random class of a labelled
//                   run) in the private file: they join its topic histogram and its generator's
//                   training; the score is the drop of the generator's loss of the document given
//                   its bin's condition (the topic model's nearest topic, its class), as ctcl
//                   scores data.eval
//   --canary-file   public texts of the user's choice instead of random ones
//   privacy.unit user: each canary is a user ("dpft-canary-<i>") of --canary-rows rows, included
//                   or not as a whole; its score is the mean over its rows.
// Runs the audit of `spec`: writes <dir>/canaries.jsonl (every canary row, the eval set),
// <dir>/canaries_in.jsonl (the included ones, appended to the training set), the training run
// under <dir>/runs/, <dir>/scores.jsonl ({"index", "score"} per canary) and <dir>/audit.json.
// ConfigError for specs the audit cannot run as written (a method that does not train,
// data.train.num_samples > 0 or data.packing, which would change which canaries are in or what one
// example is).
AuditResult run_audit(const Spec& spec, const AuditOptions& opts);

}  // namespace dpft::audit
