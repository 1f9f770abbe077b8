// Encoders: BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019) as Hugging Face's
// BertModel / RobertaModel with their heads (ModelConfig::head): sequence classification,
// masked LM, and a causal-mask LM (BertLMHeadModel, `is_decoder`), in bert.cpp.
//
// An encoder is a CausalLMImpl (the common model base: config, Linears by HF path, checkpoint
// names, load/save and PEFT) whose forward() gives the masked-LM or causal-LM head's token logits
// (B, T, V); classification goes through classify(). Parameters carry HF's names
// ("bert.encoder.layer.0.attention.self.query.weight", "roberta.embeddings.LayerNorm.bias",
// "classifier.out_proj.weight", "cls.predictions.transform.dense.weight", "lm_head.bias"); a
// checkpoint without the "bert." / "roberta." prefix (a saved BertModel) loads too.
//
// Embeddings: word + position + token type, then LayerNorm. BERT positions are 0..T-1 (plus the
// cached length); RoBERTa's are pad + cumsum(ids != pad) for real tokens and pad for padding
// (HF's create_position_ids_from_input_ids). Blocks are post-LN: x = LN(x + Attn(x)),
// x = LN(x + W2 act(W1 x)), act = exact (erf) GELU. Attention sees every non-pad key
// (attention_mask 1 = token), and only earlier ones when is_decoder. No dropout: dpft's forward
// is deterministic (docs/models.md).
#pragma once
#include "core/model/transformer.hpp"

namespace dpft::model {

class EncoderImpl : public CausalLMImpl {
 public:
  using CausalLMImpl::CausalLMImpl;
  // Last hidden states (B, T, d). ids (B, T) int64; mask (B, T) or undefined (no padding);
  // token_type_ids (B, T) int64 or undefined (all type 0).
  virtual torch::Tensor encode(const torch::Tensor& ids, const torch::Tensor& mask,
                               const torch::Tensor& token_type_ids) = 0;
  // Classification logits (B, num_labels), from the first token's hidden state (BERT: pooler
  // tanh(W h_0) then classifier; RoBERTa: tanh(dense h_0) then out_proj). Sequence-classification
  // heads only (a ConfigError otherwise).
  virtual torch::Tensor classify(const torch::Tensor& ids, const torch::Tensor& mask,
                                 const torch::Tensor& token_type_ids) = 0;
  // The masked-LM / causal-LM head on hidden states: (..., d) -> token logits (..., V), so a
  // masked LM scores only its masked positions. ConfigError without such a head.
  virtual torch::Tensor lm_head(const torch::Tensor& hidden) = 0;
};
using Encoder = std::shared_ptr<EncoderImpl>;

// The model as an encoder, or nullptr for a decoder-only model.
Encoder as_encoder(const CausalLM& m);

// Sentence embeddings: the mean of the last hidden states over the tokens with mask 1, L2-
// normalised (sentence-transformers' mean pooling + Normalize, as all-MiniLM-L6-v2).
// hidden (B, T, d), mask (B, T) -> (B, d) float32.
torch::Tensor mean_pool_normalize(const torch::Tensor& hidden, const torch::Tensor& mask);

}  // namespace dpft::model
