// The optimizers DP training steps with: SGD (momentum, L2 weight decay) and AdamW, written
// here rather than taken from torch::optim so that their state is a flat list of named plain
// tensors that checkpoints save and restore exactly.
//
// Semantics match PyTorch's (torch.optim.SGD / torch.optim.AdamW, also the C++ torch::optim
// versions, which tests/test_train.cpp compares against):
//   SGD (dampening 0, no Nesterov):  g <- g + wd * p;  buf <- g (first step) or
//     momentum * buf + g;  p <- p - lr * buf  (momentum 0: p <- p - lr * g, no buffer).
//   AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Alg. 2, in the
//     form of Kingma & Ba 2015 Alg. 1 with bias correction):  p <- p * (1 - lr * wd);
//     m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  t = this parameter's step count;
//     p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// A parameter whose gradient is undefined in a step is skipped entirely (no decay, no state
// update, its own step count t unchanged), as PyTorch does for params with grad None.
// Mixed precision (model.dtype bfloat16 / float16): the update runs on a float32 master copy of
// each lower-precision parameter (gradient, master and optimizer state all float32), and the
// parameter receives the master rounded to its dtype after every step, so updates smaller than
// the parameter's precision accumulate instead of vanishing (Micikevicius et al. 2018, "Mixed
// Precision Training", Sec. 3.1). A float32 (or float64) parameter is its own master: nothing
// is copied.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config/train_modes.hpp"

namespace dpft::train {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;  // sgd | adamw
  double weight_decay = 0;     // sgd: L2 added to the gradient; adamw: decoupled, p *= 1 - lr*wd
  double momentum = 0;         // sgd only, [0, 1)
  double beta1 = 0.9;          // adamw, [0, 1)
  double beta2 = 0.999;        // adamw, [0, 1)
  double eps = 1e-8;           // adamw, > 0; added after sqrt of the bias-corrected v
};

// Throws ConfigError naming the field when an option is out of range.
void validate(const OptimizerOptions& o);

class Optimizer {
 public:
  // params: leaf tensors (any shape, floating dtype, any device), updated in place under
  // NoGradGuard. The optimizer keeps references to them (not copies), and a float32 master copy
  // of each bfloat16 / float16 one.
  Optimizer(std::vector<torch::Tensor> params, OptimizerOptions o);

  // The values the optimizer updates, one per parameter: a float32 copy of a bfloat16 / float16
  // parameter, else the parameter itself. What checkpoints save and finiteness checks read.
  const std::vector<torch::Tensor>& masters() const { return master_; }
  // Parameters <- masters rounded to their dtype (after a caller wrote into masters(), e.g. a
  // checkpoint restore). No-op for float32 parameters.
  void masters_to_params();
  // Masters <- parameters (after the parameters were changed elsewhere, e.g. by another
  // optimizer). No-op for float32 parameters.
  void params_to_masters();

  // grads[i]: params[i]'s shape, any floating dtype (used in float32; undefined = skip that
  // param this step); grads.size() must equal params.size(). lr: this step's learning rate
  // (>= 0, finite).
  void step(const std::vector<torch::Tensor>& grads, double lr);

  // Forgets the moments and step counts (a fresh optimizer over the same parameters and
  // masters): DP-SFT's stage 2 starts its own AdamW.
  void reset_state();

  // Calls of step() so far (including those where every gradient was undefined).
  int64_t steps_taken() const { return steps_; }
  const OptimizerOptions& options() const { return opts_; }

  // Checkpoint state: named CPU contiguous copies (in the masters' dtype). Names: "step" (int64
  // scalar, steps_taken); sgd with momentum: "momentum.i" (params[i]'s shape) for every param
  // stepped at least once; adamw: "step.i" (int64 scalar, that param's own step count),
  // "exp_avg.i", "exp_avg_sq.i" (params[i]'s shape) for every param stepped at least once.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Replaces the state with `s` (as returned by state()), copied to each param's device and
  // dtype. Throws InputError naming the entry when a name is unknown, an index is out of range,
  // a shape differs from its param's, an AdamW entry lacks its partners, or "step" is missing.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& s);

 private:
  struct ParamState {
    int64_t step = 0;      // adamw: this param's step count
    torch::Tensor buf;     // sgd: momentum buffer; adamw: exp_avg (m)
    torch::Tensor buf_sq;  // adamw: exp_avg_sq (v)
  };
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> master_;  // master_[i] is params_[i] unless that is 16-bit
  std::vector<ParamState> state_;
  OptimizerOptions opts_;
  bool adamw_ = true;
  int64_t steps_ = 0;
};

}  // namespace dpft::train
