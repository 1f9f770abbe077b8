// The per-sample loss of a batch, by its objective (lm::Objective): the one definition the
// per-sample gradient engine, its slow reference, non-private training and evaluation share.
//   kNextToken       loss_b = mean over b's scored positions of -log p(y_{t+1} | y_<=t)
//                    (model::per_sample_loss; the PE-SGD paper's per-sample loss)
//   kClassification  loss_b = -log softmax(z_b)[c_b], z_b = the encoder's class logits
//                    (model::EncoderImpl::classify on ids, mask and token types), c_b the class
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

// Rows `rows` of a batch (every tensor field and the index), e.g. one sample for the reference.
LmBatch select_rows(const LmBatch& b, const std::vector<int64_t>& rows);

}  // namespace dpft::lm
