// Decoder-only causal language models built from HF configs: GPT-2 (gpt2.cpp) and
// Llama / Qwen2 (llama.cpp), sharing the attention, masking and KV-cache code here.
//
// Parameters are registered under their Hugging Face names (named_parameters() yields e.g.
// "transformer.h.0.attn.c_attn.weight" or "model.layers.0.self_attn.q_proj.weight"), so loading
// and saving a checkpoint is a name-for-name copy (GPT-2's Conv1D weights are transposed).
// Every projection is a dpft::model::Linear (linear.hpp), the layer the DP engine hooks into.
//
// Conventions: input_ids (B, T) int64; attention_mask (B, S) with 1 = real token, 0 = padding,
// where S = cached length + T (it covers the cache too); position ids are cumsum(mask) - 1, so
// left- and right-padded sequences get the same positions as unpadded ones.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.hpp"
#include "core/model/linear.hpp"

namespace dpft::model {

// Per-layer key/value cache for incremental decoding. k[l], v[l]: (B, H_kv, S_past, head_dim).
struct KVCache {
  std::vector<torch::Tensor> k, v;        // views of the first length() slots of kbuf / vbuf
  std::vector<torch::Tensor> kbuf, vbuf;  // preallocated storage, grown geometrically
  int64_t length() const { return k.empty() || !k[0].defined() ? 0 : k[0].size(2); }
  void reset() { k.clear(), v.clear(), kbuf.clear(), vbuf.clear(); }
  // Keep only batch rows `rows` (int64 (B',)), e.g. when finished sequences are dropped.
  void select_rows(const torch::Tensor& rows);
};

// LayerNorm (weight, bias) or RMSNorm (weight; with plus_one, Gemma's: scaled by 1 + weight,
// computed in fp32 before the cast).
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(int64_t dim, double eps, bool rms, bool plus_one = false);
  torch::Tensor forward(const torch::Tensor& x);  // (..., dim)
  torch::Tensor weight, bias;
  double eps;
  bool rms, plus_one;
  Capture* capture = nullptr;  // see capture.hpp
};
TORCH_MODULE(Norm);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num, int64_t dim);
  torch::Tensor forward(const torch::Tensor& ids);  // (B, T) -> (B, T, dim)
  // The tied output head: x (B, T, dim) -> logits x W^T (B, T, num).
  torch::Tensor project(const torch::Tensor& x);
  torch::Tensor weight;             // (num, dim)
  Capture* capture = nullptr;       // lookup (see capture.hpp)
  Capture* head_capture = nullptr;  // project()
};
TORCH_MODULE(Embedding);

// Which positions the output head projects: every one (the default), the last `last` (decoding
// needs one), or per row the positions in `index` (B, T') int64, in that order (training and
// evaluation project only the scored positions: next_token_scores). An int converts to `last`.
struct HeadPositions {
  HeadPositions(int64_t last = 0) : last(last) {}  // NOLINT(google-explicit-constructor)
  explicit HeadPositions(torch::Tensor index) : index(std::move(index)) {}
  int64_t last = 0;
  torch::Tensor index;  // (B, T') int64 or undefined
};

class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(ModelConfig cfg) : cfg_(std::move(cfg)) {}
  const ModelConfig& config() const { return cfg_; }
  // Names the classifier's labels (data.labels), so that saved checkpoints carry them in
  // id2label; ConfigError unless there are exactly num_labels names.
  void set_label_names(const std::vector<std::string>& names);

  // logits (B, T, V). attention_mask (B, S) may be undefined (no padding). With a cache, the
  // new keys/values are appended and positions continue from the cached length. `keep` limits
  // the head to some positions: the last keep.last, (B, keep.last, V) (decoding needs one), or
  // keep.index (B, T') -> (B, T', V); the head is skipped for the rest.
  virtual torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                KVCache* cache = nullptr, HeadPositions keep = {}) = 0;

  // Every Linear, by its HF module path (e.g. "model.layers.0.self_attn.q_proj").
  virtual std::vector<std::pair<std::string, Linear>> linears() = 0;
  // True for parameters HF stores transposed (GPT-2 Conv1D weights).
  virtual bool stored_transposed(const std::string& hf_name) const { return false; }
  // Names of the base (non-LoRA) parameters as HF checkpoints store them (tied lm_head omitted),
  // then the persistent buffers checkpoints hold too (checkpoint_buffers()).
  std::vector<std::string> checkpoint_names();
  // Buffers (never trained) that HF checkpoints store, e.g. BART's final_logits_bias.
  virtual std::vector<std::string> checkpoint_buffers() const { return {}; }
  // Houlsby bottleneck adapters (model.peft.kind adapter; bert.cpp says where they sit), each
  // of width `bottleneck`, drawn from `gen`; parameter names contain ".adapter.". ConfigError
  // for architectures without them (decoders).
  virtual void add_adapters(int64_t bottleneck, torch::Generator* gen);

 protected:
  // The final hidden states the head projects: x (B, T, d) -> (B, T', d) per `keep`.
  static torch::Tensor keep_positions(const torch::Tensor& x, const HeadPositions& keep);
  ModelConfig cfg_;
};
using CausalLM = std::shared_ptr<CausalLMImpl>;

// True for a parameter PEFT adds (LoRA factors, bottleneck adapters): not a base weight.
bool peft_parameter(const std::string& name);

// A model of cfg.model_type with random initialisation (normal(0, 0.02) for weights, as HF's
// _init_weights; norms 1, biases 0), seeded.
CausalLM make_causal_lm(const ModelConfig& cfg, uint64_t seed = 0);

// Copy base weights in by HF name. `get(name)` returns the stored tensor or an undefined tensor
// if absent. Checks every shape against the config; a missing or mis-shaped tensor is an
// InputError naming it (`what` names the checkpoint). GPT-2 names are also tried without the
// "transformer." prefix.
void load_weights(CausalLM& model, const std::function<torch::Tensor(const std::string&)>& get,
                  const std::string& what);
// Copies of the base weights by HF name (stored layout, contiguous, CPU).
std::vector<std::pair<std::string, torch::Tensor>> export_weights(CausalLM& model);

// Per-token next-token cross-entropy: logits (B, T, V), labels (B, T) -> loss (B, T - 1) where
// loss[b, t] scores labels[b, t + 1] given the prefix up to t; positions whose label is
// `ignore_index` get 0 and mask 0. Returns {loss, mask}.
std::pair<torch::Tensor, torch::Tensor> per_token_loss(const torch::Tensor& logits,
                                                       const torch::Tensor& labels,
                                                       int64_t ignore_index = -100);

// The positions whose next token is scored, per row, left-aligned: position t of row b is scored
// when labels[b, t + 1] != ignore_index. labels (B, T) -> {index (B, T') int64, targets (B, T')}
// where T' is the most scored positions of any row (at least 1), index[b, j] the j-th scored
// position of row b and targets[b, j] its label labels[b, index + 1]; a row's unused slots
// point at position 0 with target ignore_index.
std::pair<torch::Tensor, torch::Tensor> scored_positions(const torch::Tensor& labels,
                                                         int64_t ignore_index = -100);

// Per-sample next-token scores of `model` on a batch, with the head on the scored positions
// only (it is most of a small model's work: V x d multiply-adds per position, against ~12 d^2
// per layer): equal to per_sample_loss(model.forward(ids, mask), labels) (tests/test_model.cpp).
// ids (B, T), mask (B, T) or undefined, labels (B, T) -> loss (B) float32 (0 where a row scores
// nothing), tokens (B) int64 (scored positions), correct (B) int64 (argmax hits; with_correct).
struct NextTokenScores {
  torch::Tensor loss, tokens, correct;
};
NextTokenScores next_token_scores(CausalLMImpl& model, const torch::Tensor& ids,
                                  const torch::Tensor& mask, const torch::Tensor& labels,
                                  bool with_correct = false, int64_t ignore_index = -100);

// Each sample's mean next-token cross-entropy over its scored positions (the PE-SGD paper's
// per-sample loss; 0 for a sample with no scored token). logits (B, T, V), labels (B, T) ->
// loss (B), tokens (B) int64 (scored positions per sample).
std::pair<torch::Tensor, torch::Tensor> per_sample_loss(const torch::Tensor& logits,
                                                        const torch::Tensor& labels,
                                                        int64_t ignore_index = -100);

// Shared building blocks (used by gpt2.cpp and llama.cpp).
namespace detail {
// Additive attention bias (B, 1, T, S): 0 where query t may see key s (causal: s <= S - T + t,
// and mask[b, s] == 1; with window > 0 also (S - T + t) - s < window, a sliding window over
// sequence slots), the dtype's lowest value elsewhere.
torch::Tensor attention_bias(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                             torch::Dtype dtype, torch::Device device, int64_t window = 0);
// Additive attention bias (B, 1, T, S) for bidirectional attention (encoders, cross-attention):
// 0 where mask[b, s] == 1, the dtype's lowest value elsewhere (all zeros without a mask).
torch::Tensor padding_bias(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                           torch::Dtype dtype, torch::Device device);
// Position ids (B, T) for the last T of S positions: cumsum(mask) - 1 (clamped at 0), or
// arange(S - T, S) without a mask.
torch::Tensor position_ids(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                           torch::Device device);
// The feed-forward activation by its HF name (ModelConfig::activation): gelu (exact, erf),
// gelu_new and gelu_pytorch_tanh (the tanh approximation: GPT-2, Gemma), relu, silu. x any shape.
torch::Tensor activation(const std::string& name, const torch::Tensor& x);
// softmax(cap(q k^T * scale) + bias) v with GQA head repetition, where scale = 1 / sqrt(d)
// unless given and cap(s) = softcap tanh(s / softcap) when softcap > 0 (Gemma-2), else s.
// q: (B, H, T, d), k, v: (B, H_kv, S, d), bias: (B, 1, T, S) -> (B, H, T, d)
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& bias, double scale = 0, double softcap = 0);
// Appends to the cache for `layer` and returns the full k, v.
std::pair<torch::Tensor, torch::Tensor> cache_kv(KVCache* cache, size_t layer, torch::Tensor k,
                                                 torch::Tensor v);
}  // namespace detail

}  // namespace dpft::model
