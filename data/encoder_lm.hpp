// Language-model data for encoders: text encoded with the checkpoint's encoder tokenizer
// (WordPiece or RoBERTa BPE, core/tokenizer/encoder_tokenizer.hpp), for the two token-level
// objectives an encoder trains on (lm::Objective):
//   kMaskedLM   BERT / RoBERTa pretraining. Scored ids are the text's, never the specials;
//               collate draws which of them are masked (lm::MaskingOptions).
//   kNextToken  a causal BERT (is_decoder, BertLMHeadModel: CTCL's and Aug-PE's downstream
//               generators). Every id after the first ([CLS] / <s>) is a target, the final
//               [SEP] / </s> included (it plays eos).
// One example becomes [CLS] text [SEP] (<s> text </s>), truncated to max_length. Packed
// (pretraining): the documents' text ids, each followed by [SEP] (</s>), are concatenated in
// example order and cut into blocks of max_length - 2 ids, each block wrapped as
// [CLS] block [SEP]; the last partial block is dropped; block k has index k. Examples with no
// text ids (empty lines) are dropped (counted in LmDataset::dropped). Packed within documents
// (privacy.unit document): each document's text ids are cut into its own blocks of at most
// max_length - 2 ids (the last one shorter, never shared with the next document), each wrapped
// as above and indexed by the document's index, so that a document's blocks form one unit.
#pragma once
#include <cstdint>
#include <vector>

#include "core/lm/examples.hpp"
#include "core/tokenizer/encoder_tokenizer.hpp"

namespace dpft::data {

// objective: kMaskedLM or kNextToken (ConfigError otherwise, or for max_length < 3).
lm::LmDataset build_encoder_lm_dataset(const std::vector<lm::Example>& examples,
                                       const tok::EncoderTokenizer& tok, size_t max_length,
                                       bool packing, lm::Objective objective,
                                       bool within_documents = false);

}  // namespace dpft::data
