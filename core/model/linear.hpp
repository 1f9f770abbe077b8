// The one linear layer every transformer in dpft is built from, so that the engine can see
// every trainable matrix: y = x W^T + b (+ LoRA: scale * dropout(x) A^T B^T, scale = alpha / r;
// Hu et al. 2021, Eq. 3).
//   weight: (out, in)   bias: (out) or undefined   lora_A: (r, in)   lora_B: (out, r)
// GPT-2's Conv1D stores its weight as (in, out): loaders transpose it (see gpt2.cpp).
// Capture: when `capture` is set, forward() records its input (and the dropped-out input LoRA
// saw) and its output, which the per-sample gradient engine (core/grad) consumes.
#pragma once
#include <torch/torch.h>

#include <string>

#include "core/model/capture.hpp"

namespace dpft::model {

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);

  // x: (..., in) -> (..., out)
  torch::Tensor forward(const torch::Tensor& x);

  // Add LoRA factors: A ~ kaiming-uniform(a = sqrt(5)) as PEFT does, B = 0 (so the wrapped
  // layer starts equal to the base layer). Freezes nothing by itself.
  void add_lora(int64_t r, double alpha, double dropout, torch::Generator* gen = nullptr);
  bool has_lora() const { return lora_A.defined(); }
  void merge_lora();    // W += scale * B A; LoRA then inactive until unmerge_lora()
  void unmerge_lora();  // W -= scale * B A
  bool merged() const { return merged_; }
  double lora_scale() const { return lora_scale_; }
  int64_t lora_rank() const { return has_lora() ? lora_A.size(0) : 0; }
  double lora_dropout() const { return lora_dropout_; }

  int64_t in_features, out_features;
  torch::Tensor weight, bias, lora_A, lora_B;
  Capture* capture = nullptr;

 private:
  double lora_scale_ = 0, lora_dropout_ = 0;
  bool merged_ = false;
};
TORCH_MODULE(Linear);

}  // namespace dpft::model
