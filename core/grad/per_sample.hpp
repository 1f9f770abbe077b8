// Per-sample gradients: the hot path of every DP method.
//
// One batched forward with every trainable layer capturing its input and output
// (core/model/capture.hpp), then ONE autograd pass for d loss / d output of those layers, where
// loss = sum_b loss_b and loss_b is sample b's loss under the batch's objective
// (core/lm/objective.hpp: mean next-token cross-entropy, or an encoder's classification loss). Each
// trainable parameter's per-sample gradient is then a sum of "contributions":
//   outer:  G_b = sum_t u_{b,t} v_{b,t}^T      (Linear weight: u = dL/dy, v = x; LoRA A and B;
//                                               embedding lookup: u = onehot(id), v = dL/dy;
//                                               tied head: u = dL/dlogits, v = hidden)
//   direct: G_b given as a (B, numel) tensor    (biases: sum_t dL/dy; norm weights: sum_t dL/dy *
//   xhat)
// From these the engine forms, as the caller asks:
//   - per-sample squared norms, per parameter either by materialising G_b (batched matmul) or
//     by ghost norms (Li et al. 2022, "Large language models can be strong DP learners", Eq. 4):
//       ||sum_t u_t v_t^T||_F^2 = sum_{t,t'} (u_t . u_t')(v_t . v_t'),
//     extended to the inner product of two contributions to one tied parameter; chosen per
//     parameter by cost (GradOptions::mode);
//   - the weighted sum sum_b w_b G_b (w_b = clipping factor) from the kept factors with one
//     matmul per contribution (book-keeping, Bu et al. 2023: no second backward pass);
//   - the (B, p) matrix of per-sample gradients over all trainable parameters (PE-SGD needs it).
// Padding needs no special case: dL/dy is exactly 0 at padded and unscored positions.
// reference_per_sample_grads() is the slow, obvious twin (one sample at a time) that the tests
// hold this engine to.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/lm/examples.hpp"
#include "core/model/transformer.hpp"
#include "core/util/enum_names.hpp"

namespace dpft::grad {

// auto: per parameter, ghost norms when they cost fewer flops than materialising (or when the
// materialised (B, m, n) block would exceed max_materialize_mb); materialize | ghost: force.
enum class GradMode { kAuto, kMaterialize, kGhost };
inline constexpr std::array<EnumName<GradMode>, 3> kGradModeNames = {
    {{GradMode::kAuto, "auto"},
     {GradMode::kMaterialize, "materialize"},
     {GradMode::kGhost, "ghost"}}};

struct GradOptions {
  GradMode mode = GradMode::kAuto;
  double max_materialize_mb = 512;
};

struct GradParam {
  std::string name;     // HF name, e.g. "transformer.h.0.attn.c_attn.lora_A"
  torch::Tensor param;  // the trainable leaf
};

class PerSampleGrads {
 public:
  // Hooks the capture of every module that owns a trainable parameter of `model`.
  PerSampleGrads(model::CausalLM model, GradOptions opts = {});
  ~PerSampleGrads();
  PerSampleGrads(const PerSampleGrads&) = delete;
  PerSampleGrads& operator=(const PerSampleGrads&) = delete;

  const std::vector<GradParam>& params() const { return params_; }
  int64_t dim() const { return dim_; }  // p = total trainable numel

  // Forward + one backward on a batch: input_ids, attention_mask, labels (B, T) int64 (labels
  // -100 where unscored). Returns the per-sample losses (B), detached. Keeps the factors for
  // the calls below until the next compute() or release(). B = 0 is allowed.
  torch::Tensor compute(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& labels);
  // The same for any objective (core/lm/objective.hpp): next-token or classification batches.
  torch::Tensor compute(const lm::LmBatch& batch);
  int64_t batch_size() const { return batch_; }

  torch::Tensor sq_norms();  // (B) per-sample squared l2 norms over all trainable parameters
  // (B, P) per-sample squared l2 norms of each trainable parameter (params() order; 0 where a
  // parameter got no gradient): per-layer and group clipping (privacy.clipping_style).
  torch::Tensor sq_norms_by_param();
  torch::Tensor matrix();    // (B, p) float32 per-sample gradients, params() order, flattened
  // sum_b w[b] G_b, one float32 tensor per params() entry with its shape (float32 also for a
  // bfloat16 / float16 model: factors are upcast before any product). w: (B), or (B, P): column
  // k the weights of params()[k] (per-layer clipping).
  std::vector<torch::Tensor> weighted_sum(const torch::Tensor& w);
  // Per-sample gradients projected onto k directions without forming the (B, p) matrix
  // (DP-SFT, paper 002, Eq. 5: g^s_i = P^T g_i). blocks[j]: (numel_j, k), the rows of P that
  // belong to params()[j] (views of one (p, k) matrix; float32 or bfloat16). Per parameter:
  // an embedding lookup gathers the rows of P its ids touch, sum_t P_j[id_t]^T v_t; a direct
  // contribution is one matmul; a dense outer contribution is materialised a chunk of samples
  // at a time (chunk_mb bounds that block) and multiplied by P_j. Returns (B, k) float32.
  torch::Tensor project(const std::vector<torch::Tensor>& blocks, double chunk_mb = 256);
  void release();  // drop the kept activations and gradients

  // How each parameter's norm was computed in the last sq_norms() ("materialize" / "ghost" /
  // "direct"), for diagnostics and tests.
  std::vector<std::string> last_modes() const;

  struct Contribution;
  struct ParamState;

 private:
  model::CausalLM model_;
  GradOptions opts_;
  std::vector<GradParam> params_;
  int64_t dim_ = 0, batch_ = 0;
  struct Hooked;
  std::vector<std::unique_ptr<Hooked>> hooked_;
  std::vector<std::unique_ptr<ParamState>> state_;  // per params_ entry
  void collect();
  void materialize(ParamState& s);
  // (B) float64 squared norms of one parameter's per-sample gradients: ghost (from the
  // factors) or from the materialised G, by cost; sets s.mode.
  torch::Tensor param_sq_norms(ParamState& s);
};

// The reference: for each sample b, a forward and backward of loss_b alone on its unpadded
// tokens (mask == 1), gradients read from .grad. Returns (B, p) in PerSampleGrads::params()
// order and the per-sample losses (B). Slow; tests only.
std::pair<torch::Tensor, torch::Tensor> reference_per_sample_grads(
    model::CausalLM& model, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
    const torch::Tensor& labels);
std::pair<torch::Tensor, torch::Tensor> reference_per_sample_grads(model::CausalLM& model,
                                                                   const lm::LmBatch& batch);

}  // namespace dpft::grad
