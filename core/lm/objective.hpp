// The per-sample loss of a batch, by its objective (lm::Objective): the one definition the
// per-sample gradient engine, its slow reference, non-private training and evaluation share.
//   kNextToken       loss_b = mean over b's scored positions of -log p(y_{t+1} | y_<=t)
//                    (model::per_sample_loss; the PE-SGD paper's per-sample loss)
//   kClassification  loss_b = -log softmax(z_b)[c_b], z_b = the encoder's class logits
//                    (model::EncoderImpl::classify on ids, mask and token types), c_b the class
//   kMaskedLM        loss_b = mean over b's masked positions t of -log p(x_t | x~), x~ the
//                    masked input (collate draws the masks), p the masked-LM head's softmax
//   kSeq2Seq         loss_b = mean over b's scored target positions t of
//                    -log p(y_t | source_b, y_<t) (an encoder-decoder, teacher forcing)
#pragma once
#include <torch/torch.h>

#include "core/lm/examples.hpp"
#include "core/model/transformer.hpp"

namespace dpft::lm {

// (B) float32 losses on the model's device; the batch is moved there. ConfigError when a
// classification batch meets a model without a sequence-classification head.
torch::Tensor sample_losses(model::CausalLMImpl& model, const LmBatch& b);

// kClassification: the class logits (B, num_labels) on the model's device.
torch::Tensor class_logits(model::CausalLMImpl& model, const LmBatch& b);

// Each sample's mean cross-entropy at its labelled positions, unshifted (the target of position t
// is labels[t]; -100 = none): the masked-LM loss. logits (B, T, V), labels (B, T) -> loss (B)
// float32 (0 for a sample without targets), targets (B) int64.
std::pair<torch::Tensor, torch::Tensor> masked_token_loss(const torch::Tensor& logits,
                                                          const torch::Tensor& labels);

// A masked-LM batch's scores, with the head applied only at the masked positions (about 15 % of
// them: the (B, T, V) logits of every position are never formed). loss (B) float32 as
// masked_token_loss(model.forward(...), labels) (the slow reference the tests hold it to),
// targets (B) int64, correct (B) int64 = masked ids whose argmax is the target.
struct MaskedLmScores {
  torch::Tensor loss, targets, correct;
};
MaskedLmScores masked_lm_scores(model::CausalLMImpl& model, const LmBatch& b);

// A seq2seq batch's scores (model::Seq2SeqImpl): the decoder reads [decoder_start, y_0 .. y_T-2]
// (model::shift_right of the targets) and position t is scored against y_t where labelled.
// loss (B) float32, targets (B) int64 (scored positions), correct (B) int64 (argmax = y_t).
// ConfigError for a model that is not an encoder-decoder.
MaskedLmScores seq2seq_scores(model::CausalLMImpl& model, const LmBatch& b);

// Rows `rows` of a batch (every tensor field and the index), e.g. one sample for the reference.
LmBatch select_rows(const LmBatch& b, const std::vector<int64_t>& rows);

}  // namespace dpft::lm
