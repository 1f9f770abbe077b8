// The language-model data types both sides of the layering use: a text example (what the data
// layer reads from a file), its tokenised form with a per-id "scored" flag (which ids are
// prediction targets), a tokenised set, and the right-padded (B, T) batch the model, the
// per-sample gradient engine and the evaluation consume. data/ builds these from files and the
// spec (data/lm_dataset.hpp); core/ only consumes them.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/tokenizer.hpp"

namespace dpft::lm {

// A labelled or unlabelled text example with its row index in the file. With a prompt it is a
// prompt/response pair: `prompt` is the prompt, `text` the response. With `text_pair` it is a
// sentence pair for an encoder (GLUE's question/sentence, premise/hypothesis).
struct Example {
  int64_t index = 0;  // row number in the file (0-based), stable under subsampling
  std::string text;
  std::string label;                     // "" when unlabelled
  std::optional<std::string> prompt;     // set for prompt/response pairs
  std::optional<std::string> text_pair;  // set for sentence pairs
  std::string user;  // privacy.unit user: the row's user (data.train.user_column); else ""
  // A chat (data.*.messages_column): its turns; `text` then joins their contents.
  std::vector<tok::ChatMessage> messages;
};

// What a batch trains and evaluates (model::sample_losses in core/lm/objective.hpp):
//   kNextToken       each sample's mean next-token cross-entropy over its scored ids (decoders)
//   kClassification  the cross-entropy of the encoder's class logits at the sample's class id
//   kMaskedLM        each sample's mean cross-entropy of the masked-LM head at its masked
//                    positions (BERT's objective; the masks are drawn by collate, below)
//   kSeq2Seq         an encoder-decoder's mean cross-entropy over the scored target ids given
//                    the source (src_ids) and the target ids before each (teacher forcing)
enum class Objective { kNextToken, kClassification, kMaskedLM, kSeq2Seq };

// BERT's masking (Devlin et al. 2019, Sec. 3.1, as HF's DataCollatorForLanguageModeling): each
// scored id is selected with probability `rate`; a selected id becomes a target (its label is the
// original id) and its input is replaced by mask_id with probability 0.8, by a uniform random id
// in [0, vocab_size) with probability 0.1, and kept with probability 0.1. The draws of example
// `index` in draw `d` come from their own stream, seeded by (seed, index, d): a batch's masks do
// not depend on which other rows it holds, training draws d = step + 1 (new masks every step,
// identical after a resume) and evaluation d = 0 (the same masks at every evaluation).
struct MaskingOptions {
  int64_t mask_id = -1;
  int64_t vocab_size = 0;
  double rate = 0.15;
  uint64_t seed = 0;
};

// BART's text infilling (Lewis et al. 2020, Sec. 2.2; DataSpec::denoising): a kSeq2Seq set
// with mask_id >= 0 has no stored sources; collate makes each row's source from its target
// (<s> body </s>) as <s> infill(body) </s>, afresh for each `draw`.
struct InfillingOptions {
  int64_t mask_id = -1;  // < 0: off
  double ratio = 0.3;    // share of the body's tokens hidden
  double lambda = 3.0;   // span lengths ~ Poisson(lambda)
  uint64_t seed = 0;
};

// Text infilling of `body` (n ids): spans of Poisson(lambda) lengths, each replaced by one
// mask_id, drawn at random non-overlapping, non-adjacent places until round(ratio * n) ids are
// hidden (or 4 n + 16 draws were made); a span of length 0 inserts a mask_id. Deterministic in
// (o.seed, index, draw). Returns the noised ids; *hidden (if given) gets the hidden count.
std::vector<int32_t> text_infilling(const std::vector<int32_t>& body, const InfillingOptions& o,
                                    int64_t index, uint64_t draw, int64_t* hidden = nullptr);

struct TokenizedExample {
  // Example index: row in file order across train + train_extra; block number when packed.
  int64_t index = 0;
  std::vector<int32_t> ids;     // token ids, at most max_length
  std::vector<uint8_t> scored;  // per id: 1 = this id is a prediction target (label), 0 = not
                                // (prompt / control tokens when loss_on=response; bos)
  std::string label;            // class label text ("" if unlabelled)
  std::vector<uint8_t> type_ids;  // encoders: per id its segment (0 / 1); empty = all 0
  int64_t class_id = -1;          // kClassification: the label's id; -1 unlabelled
  std::vector<int32_t> src_ids;   // kSeq2Seq: the source (encoder input) ids; ids = the target
};

struct LmDataset {
  std::vector<TokenizedExample> items;
  Objective objective = Objective::kNextToken;
  MaskingOptions masking;      // kMaskedLM only
  InfillingOptions infilling;  // kSeq2Seq only: sources made from the targets when mask_id >= 0
  int64_t size() const { return static_cast<int64_t>(items.size()); }
  int64_t num_tokens() const;  // total ids
  int64_t dropped = 0;         // examples dropped while building (data/lm_dataset.hpp)
};

struct LmBatch {
  torch::Tensor input_ids;       // (B, T) int64, right-padded with pad_id, T = longest row
  torch::Tensor attention_mask;  // (B, T) int64, 1 = token
  torch::Tensor labels;  // (B, T) int64 = input_ids where scored, -100 at padding and unscored ids
  std::vector<int64_t> index;  // TokenizedExample::index per row
  Objective objective = Objective::kNextToken;
  torch::Tensor token_type_ids;  // (B, T) int64 when any row has type ids; else undefined
  torch::Tensor class_labels;    // kClassification: (B) int64 class ids; else undefined
  // kSeq2Seq: the sources, right-padded with pad_id, and their mask (B, S) int64; input_ids /
  // labels are then the targets (the decoder's inputs are made from them: seq2seq_scores).
  torch::Tensor src_ids, src_mask;
};

// rows: positions in ds.items (may be empty: returns B = 0 tensors of shape (0, 1)). pad_id:
// tokenizer pad else eos (pad_id_for). A kMaskedLM set's batch has its masks applied (draw
// `draw`, MaskingOptions): labels hold the original ids at the selected positions, -100
// elsewhere. A kSeq2Seq set with infilling gets its sources infilled from the targets (draw
// `draw`, InfillingOptions). RuntimeError for a row out of range, for an unlabelled row (class_id <
// 0) of a kClassification set, or for a kMaskedLM set without a mask id.
LmBatch collate(const LmDataset& ds, const std::vector<int64_t>& rows, int64_t pad_id,
                uint64_t draw = 0);

// The tokenizer's pad id, else its eos id; InputError naming the tokenizer if it has neither.
int64_t pad_id_for(const tok::Tokenizer& tok);

}  // namespace dpft::lm
