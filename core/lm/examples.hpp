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

#include "core/tokenizer/tokenizer.hpp"

namespace dpft::lm {

// A labelled or unlabelled text example with its row index in the file. With a prompt it is a
// prompt/response pair: `prompt` is the prompt, `text` the response.
struct Example {
  int64_t index = 0;  // row number in the file (0-based), stable under subsampling
  std::string text;
  std::string label;                  // "" when unlabelled
  std::optional<std::string> prompt;  // set for prompt/response pairs
};

struct TokenizedExample {
  // Example index: row in file order across train + train_extra; block number when packed.
  int64_t index = 0;
  std::vector<int32_t> ids;     // token ids, at most max_length
  std::vector<uint8_t> scored;  // per id: 1 = this id is a prediction target (label), 0 = not
                                // (prompt / control tokens when loss_on=response; bos)
  std::string label;            // class label text ("" if unlabelled)
};

struct LmDataset {
  std::vector<TokenizedExample> items;
  int64_t size() const { return static_cast<int64_t>(items.size()); }
  int64_t num_tokens() const;  // total ids
  int64_t dropped = 0;         // examples dropped while building (data/lm_dataset.hpp)
};

struct LmBatch {
  torch::Tensor input_ids;       // (B, T) int64, right-padded with pad_id, T = longest row
  torch::Tensor attention_mask;  // (B, T) int64, 1 = token
  torch::Tensor labels;  // (B, T) int64 = input_ids where scored, -100 at padding and unscored ids
  std::vector<int64_t> index;  // TokenizedExample::index per row
};

// rows: positions in ds.items (may be empty: returns B = 0 tensors of shape (0, 1)). pad_id:
// tokenizer pad else eos (pad_id_for). RuntimeError for a row out of range.
LmBatch collate(const LmDataset& ds, const std::vector<int64_t>& rows, int64_t pad_id);

// The tokenizer's pad id, else its eos id; InputError naming the tokenizer if it has neither.
int64_t pad_id_for(const tok::Tokenizer& tok);

}  // namespace dpft::lm
