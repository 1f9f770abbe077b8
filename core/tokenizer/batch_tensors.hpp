// A tokenized batch as LibTorch tensors, ready for a model's forward pass.
#pragma once
#include <torch/torch.h>

#include "core/tokenizer/tokenizer.hpp"

namespace dpft::tok {

struct BatchTensors {
  torch::Tensor input_ids;       // (B, T) int64
  torch::Tensor attention_mask;  // (B, T) int64: 1 = token, 0 = padding
};

// Copies a Batch (rows all of length T, as encode_batch makes them) into CPU tensors.
BatchTensors to_tensors(const Batch& batch);

}  // namespace dpft::tok
