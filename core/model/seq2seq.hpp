// Encoder-decoder models: BART (Lewis et al. 2020) as Hugging Face's BartForConditionalGeneration,
// in bart.cpp. CTCL's conditional generator (paper 004, Sec. 3.2) is a BART.
//
// A Seq2SeqImpl is a CausalLMImpl (the common model base: config, Linears by HF path, checkpoint
// names, load/save and PEFT) whose forward() is refused: it needs the source text, so it is run
// through encode() + decode() (generation, with the encoder output computed once and a decoder
// cache) or seq2seq_logits() (training and evaluation, one call).
//
// Parameters carry HF's names: "model.shared.weight" (the token embeddings the encoder, the
// decoder and the tied lm_head share), "model.encoder.embed_positions.weight",
// "model.encoder.layernorm_embedding.weight", "model.encoder.layers.0.self_attn.q_proj.weight",
// "model.decoder.layers.0.encoder_attn.k_proj.weight", "model.decoder.layers.0.fc1.weight", and
// the buffer "final_logits_bias" (1, V) added to the logits (HF keeps it out of training too).
//
// The computation (HF's modeling_bart, post-LN as BART; no dropout, docs/models.md):
//   embed(ids, past) = LN_emb(shared(ids) * s + P[arange(past, past + T) + 2]),
//                      s = sqrt(d) with scale_embedding else 1; the position table has
//                      max_position_embeddings + 2 rows (BART's offset of 2); positions do not
//                      depend on padding, so padding goes on the right
//   encoder layer:     x = LN(x + SelfAttn(x; source padding mask)); x = LN(x + W2 act(W1 x))
//   decoder layer:     x = LN(x + SelfAttn(x; causal + target padding mask));
//                      x = LN(x + CrossAttn(x, encoder output; source padding mask));
//                      x = LN(x + W2 act(W1 x))
//   logits = decoder output shared^T + final_logits_bias
// Attention: softmax(q k^T / sqrt(head_dim) + bias) v; HF scales q after q_proj, the same product.
#pragma once
#include "core/model/transformer.hpp"

namespace dpft::model {

// Decoder state for incremental decoding: the self-attention cache grows by one position per
// step; the cross-attention keys and values of the encoder output are computed once (first
// decode call) and kept. cross_k[l], cross_v[l]: (B, H, S_src, head_dim).
struct Seq2SeqCache {
  KVCache self;
  std::vector<torch::Tensor> cross_k, cross_v;
  int64_t length() const { return self.length(); }
  // Keep only batch rows `rows` (int64 (B',)), e.g. beams or finished sequences.
  void select_rows(const torch::Tensor& rows);
};

class Seq2SeqImpl : public CausalLMImpl {
 public:
  using CausalLMImpl::CausalLMImpl;
  // The encoder's last hidden states (B, S, d). src_ids (B, S) int64; src_mask (B, S) (1 = token)
  // or undefined (no padding).
  virtual torch::Tensor encode(const torch::Tensor& src_ids, const torch::Tensor& src_mask) = 0;
  // Decoder logits (B, T, V) for dec_ids (B, T) given the encoder output enc (B, S, d) and its
  // mask. dec_mask (B, past + T) or undefined. With a cache, positions continue from its length
  // and the new keys/values are appended; `keep` limits the head's positions (HeadPositions).
  virtual torch::Tensor decode(const torch::Tensor& dec_ids, const torch::Tensor& dec_mask,
                               const torch::Tensor& enc, const torch::Tensor& src_mask,
                               Seq2SeqCache* cache = nullptr, HeadPositions keep = {}) = 0;
  // encode + decode in one pass whose shared-embedding lookup runs once (on the source and
  // target ids side by side), as the per-sample gradient engine's capture requires. Same shapes
  // as decode: (B, T, V).
  virtual torch::Tensor seq2seq_logits(const torch::Tensor& src_ids, const torch::Tensor& src_mask,
                                       const torch::Tensor& dec_ids,
                                       const torch::Tensor& dec_mask) = 0;

  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        KVCache* cache = nullptr, HeadPositions keep = {}) override;
};
using Seq2Seq = std::shared_ptr<Seq2SeqImpl>;

// The model as an encoder-decoder, or nullptr.
Seq2Seq as_seq2seq(const CausalLM& m);

// BART's teacher forcing (HF's shift_tokens_right): decoder inputs = [decoder_start, labels[:-1]]
// with -100 labels replaced by pad. labels (B, T) int64 -> (B, T) int64.
torch::Tensor shift_right(const torch::Tensor& labels, int64_t decoder_start, int64_t pad);

}  // namespace dpft::model
