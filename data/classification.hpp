// Sequence-classification data for encoders: examples (data/table.hpp; `text`, optional
// `text_pair`, `label`) encoded with the checkpoint's tokenizer as single sentences
// ([CLS] a [SEP] / <s> a </s>) or pairs ([CLS] a [SEP] b [SEP] with token types / <s> a </s></s>
// b </s>), truncated longest_first to max_length, with each label mapped to its class id.
// Batches pad dynamically (lm::collate pads to the longest row of each batch).
#pragma once
#include <string>
#include <vector>

#include "core/lm/examples.hpp"
#include "core/tokenizer/encoder_tokenizer.hpp"

namespace dpft::data {

// The label names in class-id order: `given` (data.labels) when not empty, else the model's
// labels when they are real names (not HF's LABEL_0, LABEL_1, ... placeholders). Never read from
// the private data: the label set is public task knowledge, and a set taken from the training
// file would be a non-DP release of which labels occur. ConfigError when neither names them, when
// a name repeats, or when the count differs from the model's num_labels (`model_labels`).
std::vector<std::string> resolve_labels(const std::vector<std::string>& given,
                                        const std::vector<std::string>& model_labels);

// Encode every example (kClassification set: ids, type ids, class id; no id is "scored").
// `what` names the data set in errors: an unlabelled example, or a label outside `labels`
// (InputError naming the row and the known labels); ConfigError for max_length < 3 (no room for
// the specials and one token).
lm::LmDataset build_classification_dataset(const std::vector<lm::Example>& examples,
                                           const tok::EncoderTokenizer& tok,
                                           const std::vector<std::string>& labels,
                                           size_t max_length, const std::string& what);

}  // namespace dpft::data
