// BART as HF's BartForConditionalGeneration (seq2seq.hpp says what it computes).
#include <fmt/format.h>

#include <cmath>

#include "core/model/seq2seq.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::model {

namespace {

struct BartAttentionImpl : torch::nn::Module {
  explicit BartAttentionImpl(const ModelConfig& c) {
    q_proj = register_module("q_proj", Linear(c.hidden_size, c.hidden_size, true));
    k_proj = register_module("k_proj", Linear(c.hidden_size, c.hidden_size, true));
    v_proj = register_module("v_proj", Linear(c.hidden_size, c.hidden_size, true));
    out_proj = register_module("out_proj", Linear(c.hidden_size, c.hidden_size, true));
  }
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(BartAttention);

// One encoder layer (cross = false) or decoder layer (cross = true), HF's names.
struct BartLayerImpl : torch::nn::Module {
  BartLayerImpl(const ModelConfig& c, bool cross) {
    self_attn = register_module("self_attn", BartAttention(c));
    self_attn_layer_norm =
        register_module("self_attn_layer_norm", Norm(c.hidden_size, c.norm_eps, false));
    if (cross) {
      encoder_attn = register_module("encoder_attn", BartAttention(c));
      encoder_attn_layer_norm =
          register_module("encoder_attn_layer_norm", Norm(c.hidden_size, c.norm_eps, false));
    }
    fc1 = register_module("fc1", Linear(c.hidden_size, c.intermediate_size, true));
    fc2 = register_module("fc2", Linear(c.intermediate_size, c.hidden_size, true));
    final_layer_norm = register_module("final_layer_norm", Norm(c.hidden_size, c.norm_eps, false));
  }
  BartAttention self_attn{nullptr}, encoder_attn{nullptr};
  Norm self_attn_layer_norm{nullptr}, encoder_attn_layer_norm{nullptr}, final_layer_norm{nullptr};
  Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(BartLayer);

// BartEncoder / BartDecoder: positions (max_position + 2 rows), the embedding LayerNorm, layers.
// The token embeddings are the model's shared table (model.shared).
struct BartStackImpl : torch::nn::Module {
  BartStackImpl(const ModelConfig& c, int64_t n_layers, bool decoder) {
    embed_positions =
        register_module("embed_positions", Embedding(c.max_position + 2, c.hidden_size));
    layernorm_embedding =
        register_module("layernorm_embedding", Norm(c.hidden_size, c.norm_eps, false));
    auto list = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_layers; ++i) {
      layers.push_back(BartLayer(c, decoder));
      list->push_back(layers.back());
    }
  }
  Embedding embed_positions{nullptr};
  Norm layernorm_embedding{nullptr};
  std::vector<BartLayer> layers;
};
TORCH_MODULE(BartStack);

constexpr int64_t kPositionOffset = 2;  // BartLearnedPositionalEmbedding's offset

class BartImpl : public Seq2SeqImpl {
 public:
  explicit BartImpl(const ModelConfig& c) : Seq2SeqImpl(c) {
    auto m = register_module("model", std::make_shared<torch::nn::Module>());
    shared = m->register_module("shared", Embedding(c.vocab_size, c.hidden_size));
    encoder = m->register_module("encoder", BartStack(c, c.num_layers, false));
    decoder = m->register_module("decoder", BartStack(c, c.decoder_layers, true));
    model_ = m;
    final_logits_bias = register_buffer("final_logits_bias", torch::zeros({1, c.vocab_size}));
  }

  std::vector<std::string> checkpoint_buffers() const override { return {"final_logits_bias"}; }

  torch::Tensor encode(const torch::Tensor& src_ids, const torch::Tensor& src_mask) override {
    check_ids(src_ids, "source", 0);
    return run_encoder(shared(src_ids), src_mask);
  }

  torch::Tensor decode(const torch::Tensor& dec_ids, const torch::Tensor& dec_mask,
                       const torch::Tensor& enc, const torch::Tensor& src_mask, Seq2SeqCache* cache,
                       HeadPositions keep) override {
    check_ids(dec_ids, "target", cache ? cache->length() : 0);
    DPFT_CHECK(enc.dim() == 3 && enc.size(0) == dec_ids.size(0) && enc.size(2) == cfg_.hidden_size,
               "decode: encoder output must be (B, S, {}) with B = {}, got {}", cfg_.hidden_size,
               dec_ids.size(0), shape_str(enc.sizes()));
    torch::Tensor h = run_decoder(shared(dec_ids), dec_mask, enc, src_mask, cache);
    return head(keep_positions(h, keep));
  }

  torch::Tensor seq2seq_logits(const torch::Tensor& src_ids, const torch::Tensor& src_mask,
                               const torch::Tensor& dec_ids,
                               const torch::Tensor& dec_mask) override {
    check_ids(src_ids, "source", 0);
    check_ids(dec_ids, "target", 0);
    DPFT_CHECK(src_ids.size(0) == dec_ids.size(0),
               "source and target batches differ: {} and {} rows", src_ids.size(0),
               dec_ids.size(0));
    const int64_t S = src_ids.size(1);
    torch::Tensor tok = shared(torch::cat({src_ids, dec_ids.to(src_ids.device())}, 1));
    torch::Tensor enc = run_encoder(tok.slice(1, 0, S), src_mask);
    return head(run_decoder(tok.slice(1, S), dec_mask, enc, src_mask, nullptr));
  }

  std::vector<std::pair<std::string, Linear>> linears() override {
    std::vector<std::pair<std::string, Linear>> out;
    auto add = [&](const std::string& p, const BartAttention& a) {
      out.emplace_back(p + ".q_proj", a->q_proj);
      out.emplace_back(p + ".k_proj", a->k_proj);
      out.emplace_back(p + ".v_proj", a->v_proj);
      out.emplace_back(p + ".out_proj", a->out_proj);
    };
    for (const auto& [stack, name] :
         {std::pair<BartStack, std::string>{encoder, "encoder"}, {decoder, "decoder"}})
      for (size_t l = 0; l < stack->layers.size(); ++l) {
        const std::string p = "model." + name + ".layers." + std::to_string(l);
        const auto& b = stack->layers[l];
        add(p + ".self_attn", b->self_attn);
        if (b->encoder_attn) add(p + ".encoder_attn", b->encoder_attn);
        out.emplace_back(p + ".fc1", b->fc1);
        out.emplace_back(p + ".fc2", b->fc2);
      }
    return out;
  }

 private:
  void check_ids(const torch::Tensor& ids, const char* what, int64_t past) const {
    DPFT_CHECK(ids.dim() == 2, "{} ids must be (B, T), got {}", what, shape_str(ids.sizes()));
    DPFT_CHECK_AS(InputError, past + ids.size(1) <= cfg_.max_position,
                  "a {} sequence of {} tokens exceeds the {} positions of this bart model; "
                  "truncate it (data.max_length)",
                  what, past + ids.size(1), cfg_.max_position);
  }

  // LN_emb(tok * s + P[past .. past + T) + 2]): (B, T, d)
  torch::Tensor embed(BartStack& stack, const torch::Tensor& tok, int64_t past) {
    const int64_t B = tok.size(0), T = tok.size(1);
    torch::Tensor pos =
        torch::arange(past + kPositionOffset, past + T + kPositionOffset,
                      torch::TensorOptions().dtype(torch::kInt64).device(tok.device()))
            .unsqueeze(0)
            .expand({B, T});
    const double s = cfg_.scale_embedding ? std::sqrt(static_cast<double>(cfg_.hidden_size)) : 1.0;
    return stack->layernorm_embedding((s == 1.0 ? tok : tok * s) + stack->embed_positions(pos));
  }

  torch::Tensor heads(const torch::Tensor& t) const {  // (B, T, d) -> (B, H, T, hd)
    return t.view({t.size(0), t.size(1), cfg_.num_heads, cfg_.head_dim}).transpose(1, 2);
  }
  torch::Tensor merge(const torch::Tensor& t) const {  // (B, H, T, hd) -> (B, T, d)
    return t.transpose(1, 2).reshape({t.size(0), t.size(2), cfg_.hidden_size});
  }

  torch::Tensor run_encoder(const torch::Tensor& tok, const torch::Tensor& mask) {
    const int64_t B = tok.size(0), S = tok.size(1);
    torch::Tensor x = embed(encoder, tok, 0);
    torch::Tensor bias = detail::padding_bias(mask, B, S, S, x.scalar_type(), x.device());
    for (auto& b : encoder->layers) {
      auto& a = b->self_attn;
      torch::Tensor o =
          detail::attend(heads(a->q_proj(x)), heads(a->k_proj(x)), heads(a->v_proj(x)), bias);
      x = b->self_attn_layer_norm(x + a->out_proj(merge(o)));
      x = b->final_layer_norm(x + b->fc2(detail::activation(cfg_.activation, b->fc1(x))));
    }
    return x;
  }

  torch::Tensor run_decoder(const torch::Tensor& tok, const torch::Tensor& mask,
                            const torch::Tensor& enc, const torch::Tensor& src_mask,
                            Seq2SeqCache* cache) {
    const int64_t B = tok.size(0), T = tok.size(1), past = cache ? cache->length() : 0,
                  S = past + T, S_src = enc.size(1);
    torch::Tensor x = embed(decoder, tok, past);
    torch::Tensor self_bias = detail::attention_bias(mask, B, T, S, x.scalar_type(), x.device());
    torch::Tensor cross_bias =
        detail::padding_bias(src_mask, B, T, S_src, x.scalar_type(), x.device());
    const bool fresh_cross = cache && cache->cross_k.empty();
    for (size_t l = 0; l < decoder->layers.size(); ++l) {
      auto& b = decoder->layers[l];
      auto& a = b->self_attn;
      auto [k, v] = detail::cache_kv(cache ? &cache->self : nullptr, l, heads(a->k_proj(x)),
                                     heads(a->v_proj(x)));
      x = b->self_attn_layer_norm(
          x + a->out_proj(merge(detail::attend(heads(a->q_proj(x)), k, v, self_bias))));
      auto& c = b->encoder_attn;
      torch::Tensor ck, cv;
      if (cache && !fresh_cross) {
        ck = cache->cross_k[l], cv = cache->cross_v[l];
      } else {
        ck = heads(c->k_proj(enc)), cv = heads(c->v_proj(enc));
        if (fresh_cross) cache->cross_k.push_back(ck), cache->cross_v.push_back(cv);
      }
      x = b->encoder_attn_layer_norm(
          x + c->out_proj(merge(detail::attend(heads(c->q_proj(x)), ck, cv, cross_bias))));
      x = b->final_layer_norm(x + b->fc2(detail::activation(cfg_.activation, b->fc1(x))));
    }
    return x;
  }

  torch::Tensor head(const torch::Tensor& h) {  // (B, T, d) -> (B, T, V)
    return shared->project(h) + final_logits_bias.to(h.scalar_type());
  }

  std::shared_ptr<torch::nn::Module> model_;
  Embedding shared{nullptr};
  BartStack encoder{nullptr}, decoder{nullptr};
  torch::Tensor final_logits_bias;
};

}  // namespace

void Seq2SeqCache::select_rows(const torch::Tensor& rows) {
  self.select_rows(rows);
  for (auto& t : cross_k) t = t.index_select(0, rows);
  for (auto& t : cross_v) t = t.index_select(0, rows);
}

torch::Tensor Seq2SeqImpl::forward(const torch::Tensor&, const torch::Tensor&, KVCache*,
                                   HeadPositions) {
  throw ConfigError(fmt::format(
      "this {} model is an encoder-decoder: it needs source text as well as target text (a "
      "prompt/response data set trained with the seq2seq objective), not a plain token stream",
      cfg_.model_type));
}

CausalLM make_bart(const ModelConfig& cfg) {
  return std::make_shared<BartImpl>(cfg);
}

Seq2Seq as_seq2seq(const CausalLM& m) {
  return std::dynamic_pointer_cast<Seq2SeqImpl>(m);
}

torch::Tensor shift_right(const torch::Tensor& labels, int64_t decoder_start, int64_t pad) {
  DPFT_CHECK(labels.dim() == 2, "shift_right: labels must be (B, T), got {}",
             shape_str(labels.sizes()));
  torch::Tensor out = torch::empty_like(labels);
  out.select(1, 0).fill_(decoder_start);
  if (labels.size(1) > 1) out.slice(1, 1).copy_(labels.slice(1, 0, -1));
  return out.masked_fill(out == -100, pad);
}

}  // namespace dpft::model
