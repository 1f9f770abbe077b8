// What a layer records for the per-sample gradient engine (core/grad) during one forward pass.
// The engine points a module's `capture` at one of these, runs the forward, then asks autograd
// for d loss / d output of every captured module in a single backward; with the inputs kept here
// it forms per-sample gradients (or their norms, or their clipped sum) by batched matmuls.
// A capturing module must run exactly once per forward (`calls` lets the engine check it).
#pragma once
#include <torch/torch.h>

namespace dpft::model {

struct Capture {
  torch::Tensor input;   // Linear: x (B, T, in); Embedding lookup: ids (B, T); head: hidden (B, T, d)
  torch::Tensor aux;     // Linear with active LoRA dropout: dropout(x) (B, T, in); Norm: normalised x (B, T, d)
  torch::Tensor output;  // the module output, still in the autograd graph (B, T, out)
  int calls = 0;
  void clear() { input = aux = output = torch::Tensor(), calls = 0; }
};

// A module that adds a trainable bias of its own to logits computed elsewhere (BERT's
// cls.predictions.bias, RoBERTa's lm_head.bias: y = decoder(x) + bias, (B, T, V)). The engine
// sets `bias_capture`; the module records y there once per forward. The per-sample gradient of
// the bias is sum_t dL/dy[b, t, :].
struct OutputBiasHost {
  virtual ~OutputBiasHost() = default;
  virtual torch::Tensor output_bias() const = 0;  // (V)
  Capture* bias_capture = nullptr;
};

}  // namespace dpft::model
