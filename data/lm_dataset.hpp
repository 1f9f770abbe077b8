// Language-model data: examples (data/table.hpp) turned into token-id sequences with a per-id
// "scored" flag (which ids are prediction targets), optionally packed into fixed-length blocks,
// and collated into right-padded (B, T) batches with labels for model::per_token_loss.
//
// One example becomes (max_length caps every sequence):
//   plain text          [bos] + encode(text) [+ eos]            all ids scored except bos
//   pair, chat none     [bos] + encode(prompt) + encode(response) [+ eos]
//                       loss_on=response: only the response ids (and its eos) are scored
//   pair, chat format   encode_chat(render_chat({user: prompt}, {assistant: response}))
//                       (the format's own markers; no extra bos/eos); loss_on=response:
//                       only the response tokens and its end-of-turn marker are scored
// bos is added where the tokenizer adds it (Tokenizer::add_bos). eos (add_eos) is appended to
// an unpacked example only when it fits: a truncated example ends without one.
//
// Dropped (with one spdlog warning giving the count): examples with fewer than 2 ids (an
// empty text: nothing to predict) and examples without any scored id after the first
// position (e.g. a prompt that fills max_length under loss_on=response). Position 0 is never a
// target: per_token_loss scores labels[t + 1] from position t.
//
// Packing (pretraining): each document's ids ([bos] + content + eos, where eos is required)
// are concatenated in example order and cut into blocks of exactly max_length ids; the last
// partial block is dropped. Documents with no content ids are skipped. Block k has index k.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/config/spec.hpp"
#include "core/lm/examples.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "data/table.hpp"

namespace dpft::data {

using lm::Example;
using lm::LmBatch;
using lm::LmDataset;
using lm::TokenizedExample;

struct LmDataOptions {
  int64_t max_length = 128;
  bool add_eos = true;
  bool packing = false;
  // With packing, cut each document into its own blocks (the last one shorter, padded when
  // collated) rather than one stream: a block never holds two documents, and every block of a
  // document carries the document's example index (TokenizedExample::index), so that its
  // blocks can be kept one privacy unit (privacy.unit document; core/privacy/units.hpp).
  bool within_documents = false;
  bool response_only = false;  // loss_on == response
  // none | auto (the tokenizer's) | plain | chatml | qwen2.5 | llama3
  ChatFormatChoice chat_format = ChatFormatChoice::kNone;
};

// The chat format a choice names (chatml, qwen2.5, ...); nullopt for none and auto.
std::optional<tok::ChatFormat> fixed_chat_format(ChatFormatChoice c);
LmDataOptions lm_data_options(const DataSpec& d);

// data.task seq2seq: each example's prompt is the source, its text the target, for an
// encoder-decoder (BART): src_ids = [bos] + encode(prompt) + [eos] and ids = [bos] +
// encode(text) + [eos], each cut to max_length by dropping content (bos and eos kept, as HF's
// tokenizers truncate); every target id is scored. InputError naming the row for an example
// without a prompt, or when the tokenizer has no bos or eos.
// With `source_from_method` (method ctcl, which makes each source from the document's topic) a
// row without a prompt gets an empty source, <s> </s>, until the method sets it.
// With `denoising` enabled (data.denoising) rows need no prompt: the set's infilling options
// are set (mask id: the tokenizer's <mask>; seed `seed`) and collate makes each source from its
// target. InputError if the tokenizer has no <mask>.
LmDataset build_seq2seq_dataset(const std::vector<Example>& examples, const tok::Tokenizer& tok,
                                int64_t max_length, bool source_from_method = false,
                                const DenoisingSpec& denoising = {}, uint64_t seed = 0);
// <s> + encode(text) cut to max_length - 2 ids + </s>: a seq2seq source or target.
std::vector<int32_t> seq2seq_ids(const std::string& text, const tok::Tokenizer& tok,
                                 int64_t max_length);

// Tokenize examples (truncating to max_length, bos where the tokenizer adds it), or pack them.
// ConfigError for max_length < 2 or an unknown chat format; InputError when packing with a
// tokenizer that has no eos.
LmDataset build_lm_dataset(const std::vector<Example>& examples, const tok::Tokenizer& tok,
                           const LmDataOptions& o);

// The examples of one dataset block (read, columns picked), not subsampled. `key` names the
// spec block in messages (e.g. "data.train"): InputError if the file is missing, ConfigError
// if the block has no path.
std::vector<Example> read_examples(const DatasetSpec& d, const std::string& key);

// Read + subsample (DatasetSpec.num_samples, seeded by `seed`) + tokenize one data set; with
// `extra` (train_extra) appended before subsampling/packing: each extra block is first
// subsampled by its own num_samples (seed + 1 + i), then the concatenation by d.num_samples.
// Example indices continue across files (file k's rows start after all rows of files < k).
// InputError if a file is missing; names the spec key.
LmDataset load_lm_dataset(const DatasetSpec& d, const std::vector<DatasetSpec>& extra,
                          const DataSpec& data, const tok::Tokenizer& tok, uint64_t seed);

// What makes two examples the same for exclude_train and the eval / train overlap check: the
// text, with its pair sentence when it has one (an RTE premise that recurs with another
// hypothesis is another example). Prompts are not part of it: a response is private text
// whatever prompt it comes with.
std::string example_key(const Example& e);

// DatasetSpec::hash_split's position of a key in [0, 1): the top 53 bits of its SHA-256's first
// 8 bytes (big-endian) over 2^53 (python: (int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)
// >> 11) / 2**53).
double hash_fraction(const std::string& key);

// The examples load_lm_dataset tokenizes (read + extra + subsample, same seeds). With
// `exclude_texts`, rows whose example_key is in the set are dropped before subsampling (a held-out
// eval set from the training file: DatasetSpec::exclude_train; keys from example_key);
// InputError if none is left.
std::vector<Example> select_examples(
    const DatasetSpec& d, const std::vector<DatasetSpec>& extra, const DataSpec& data,
    uint64_t seed, const std::unordered_set<std::string>* exclude_texts = nullptr);

}  // namespace dpft::data
