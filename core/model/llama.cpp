// The Llama family as HF's LlamaForCausalLM, Qwen2/Qwen3ForCausalLM, MistralForCausalLM,
// GemmaForCausalLM, Gemma2ForCausalLM and Phi3ForCausalLM: RMSNorm pre-norm blocks, rotary
// position embeddings (rotate-half form, base rope_theta; Llama-3's scaling, Phi-3's longrope),
// grouped-query attention, gated MLP down(act(gate(x)) * up(x)) (SwiGLU; Gemma's GeGLU with the
// tanh GELU), tied or untied lm_head. Per family:
//   Qwen2: q/k/v biases. Qwen3: an RMSNorm over each head's query and key (q_norm, k_norm:
//     (head_dim)) before the rotation. Llama / Qwen3 / Gemma attention_bias: q/k/v/o biases;
//     Llama mlp_bias: gate/up/down biases.
//   Mistral (Jiang et al. 2023): sliding-window attention, query i sees keys j with i - j < W.
//   Gemma (Gemma Team 2024a): RMSNorm scaled by (1 + weight), embeddings times sqrt(d) (in the
//     activations' dtype), head_dim 256, tied head.
//   Gemma-2 (Gemma Team 2024b): Gemma plus norms after attention and after the MLP (sandwich:
//     x + post_norm(attn(pre_norm(x)))), scores scaled by query_pre_attn_scalar^-1/2 and
//     soft-capped as cap tanh(s / cap) before the mask (attn 50), logits capped likewise
//     (final 30), local (sliding window 4096) and global layers alternating, local first.
//   Phi-3 (Abdin et al. 2024): fused projections qkv_proj (rows: q, then k, then v) and
//     gate_up_proj (rows: gate, then up); longrope scaling.
#include <array>
#include <cmath>

#include "core/model/transformer.hpp"

namespace dpft::model {

namespace {

// Rotary inverse frequencies (head_dim / 2,): theta^(-2i / head_dim), with Llama-3 scaling
// when configured (wavelengths shorter than orig/high_freq_factor keep their frequency, longer
// than orig/low_freq_factor are divided by `factor`, and those between are interpolated), or
// longrope's per-frequency divisors `ext` (short_factor or long_factor).
torch::Tensor rope_inv_freq(const ModelConfig& c, const std::vector<double>* ext = nullptr) {
  int64_t half = c.head_dim / 2;
  torch::Tensor idx =
      torch::arange(0, half, torch::kFloat64) * 2.0 / static_cast<double>(c.head_dim);
  torch::Tensor inv = 1.0 / torch::pow(torch::full({}, c.rope_theta, torch::kFloat64), idx);
  if (ext) return (inv / torch::tensor(*ext, torch::kFloat64)).to(torch::kFloat32);
  if (c.rope_scaling && c.rope_scaling->type == RopeType::kLlama3) {
    const RopeScaling& s = *c.rope_scaling;
    double orig = static_cast<double>(s.original_max_position_embeddings);
    double low_wl = orig / s.low_freq_factor, high_wl = orig / s.high_freq_factor;
    torch::Tensor wl = 2 * M_PI / inv;
    torch::Tensor smooth =
        (orig / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    torch::Tensor mid = (1 - smooth) * inv / s.factor + smooth * inv;
    inv = torch::where(wl < high_wl, inv, torch::where(wl > low_wl, inv / s.factor, mid));
  }
  return inv.to(torch::kFloat32);
}

// longrope's scale of cos and sin: attention_factor, else sqrt(1 + ln(s) / ln(original)) for
// s = max_position / original > 1, else 1.
double rope_attention_factor(const ModelConfig& c) {
  if (!c.rope_scaling || c.rope_scaling->type != RopeType::kLongRope) return 1.0;
  const RopeScaling& s = *c.rope_scaling;
  if (s.attention_factor) return *s.attention_factor;
  if (s.factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(s.factor) /
                             std::log(static_cast<double>(s.original_max_position_embeddings)));
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  int64_t h = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, h), x.slice(-1, 0, h)}, -1);
}

struct LlamaAttentionImpl : torch::nn::Module {
  LlamaAttentionImpl(const ModelConfig& c) {
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    if (c.fused_projections) {
      qkv_proj = register_module("qkv_proj", Linear(c.hidden_size, q + 2 * kv, c.attention_bias));
    } else {
      q_proj = register_module("q_proj", Linear(c.hidden_size, q, c.attention_bias));
      k_proj = register_module("k_proj", Linear(c.hidden_size, kv, c.attention_bias));
      v_proj = register_module("v_proj", Linear(c.hidden_size, kv, c.attention_bias));
    }
    o_proj = register_module("o_proj", Linear(q, c.hidden_size, c.o_bias));
    if (c.qk_norm) {
      q_norm = register_module("q_norm", Norm(c.head_dim, c.norm_eps, true));
      k_norm = register_module("k_norm", Norm(c.head_dim, c.norm_eps, true));
    }
  }
  // Queries (B, T, H, head_dim), keys and values (B, T, H_kv, head_dim) of a (B, T, d).
  std::array<torch::Tensor, 3> project(const torch::Tensor& a, const ModelConfig& c) {
    const int64_t B = a.size(0), T = a.size(1);
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    torch::Tensor qq, kk, vv;
    if (qkv_proj) {
      torch::Tensor all = qkv_proj(a);
      qq = all.slice(-1, 0, q), kk = all.slice(-1, q, q + kv), vv = all.slice(-1, q + kv);
    } else {
      qq = q_proj(a), kk = k_proj(a), vv = v_proj(a);
    }
    return {qq.reshape({B, T, c.num_heads, c.head_dim}),
            kk.reshape({B, T, c.num_kv_heads, c.head_dim}),
            vv.reshape({B, T, c.num_kv_heads, c.head_dim})};
  }
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, qkv_proj{nullptr}, o_proj{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};  // qwen3 only
};
TORCH_MODULE(LlamaAttention);

struct LlamaMLPImpl : torch::nn::Module {
  LlamaMLPImpl(const ModelConfig& c) : act(c.activation), inter(c.intermediate_size) {
    if (c.fused_projections) {
      gate_up_proj = register_module("gate_up_proj",
                                     Linear(c.hidden_size, 2 * c.intermediate_size, c.mlp_bias));
    } else {
      gate_proj =
          register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
      up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    }
    down_proj =
        register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& h) {  // (B, T, d) -> (B, T, d)
    torch::Tensor gate, up;
    if (gate_up_proj) {
      torch::Tensor gu = gate_up_proj(h);
      gate = gu.slice(-1, 0, inter), up = gu.slice(-1, inter);
    } else {
      gate = gate_proj(h), up = up_proj(h);
    }
    return down_proj(detail::activation(act, gate) * up);
  }
  std::string act;
  int64_t inter;
  Linear gate_proj{nullptr}, up_proj{nullptr}, gate_up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

struct LlamaLayerImpl : torch::nn::Module {
  LlamaLayerImpl(const ModelConfig& c) {
    auto norm = [&](const char* name) {
      return register_module(name, Norm(c.hidden_size, c.norm_eps, true, c.norm_plus_one));
    };
    input_layernorm = norm("input_layernorm");
    self_attn = register_module("self_attn", LlamaAttention(c));
    post_attention_layernorm = norm("post_attention_layernorm");
    if (c.sandwich_norms) {
      pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
      post_feedforward_layernorm = norm("post_feedforward_layernorm");
    }
    mlp = register_module("mlp", LlamaMLP(c));
  }
  Norm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Norm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  // gemma2
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
};
TORCH_MODULE(LlamaLayer);

struct LlamaBodyImpl : torch::nn::Module {
  LlamaBodyImpl(const ModelConfig& c) {
    embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size));
    layers_list = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers.push_back(LlamaLayer(c));
      layers_list->push_back(layers.back());
    }
    norm = register_module("norm", Norm(c.hidden_size, c.norm_eps, true, c.norm_plus_one));
  }
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers_list{nullptr};
  std::vector<LlamaLayer> layers;
  Norm norm{nullptr};
};
TORCH_MODULE(LlamaBody);

class LlamaImpl : public CausalLMImpl {
 public:
  explicit LlamaImpl(const ModelConfig& c) : CausalLMImpl(c) {
    body = register_module("model", LlamaBody(c));
    if (!c.tie_word_embeddings)
      lm_head = register_module("lm_head", Linear(c.hidden_size, c.vocab_size, false));
    const bool longrope = c.rope_scaling && c.rope_scaling->type == RopeType::kLongRope;
    inv_freq = register_buffer(
        "inv_freq", rope_inv_freq(c, longrope ? &c.rope_scaling->short_factor : nullptr));
    if (longrope)
      inv_freq_long =
          register_buffer("inv_freq_long", rope_inv_freq(c, &c.rope_scaling->long_factor));
  }

  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask, KVCache* cache,
                        HeadPositions keep) override {
    const ModelConfig& c = cfg_;
    int64_t B = ids.size(0), T = ids.size(1), S = (cache ? cache->length() : 0) + T;
    auto dev = ids.device();
    torch::Tensor x = body->embed_tokens(ids);
    if (c.scale_embedding)  // Gemma: sqrt(d) rounded to the activations' dtype first
      x = x * torch::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)),
                                   x.options().device(torch::kCPU));
    torch::Tensor pos = detail::position_ids(mask, B, T, S, dev);
    auto [cos, sin] = rotary(pos, x.scalar_type());
    torch::Tensor global = detail::attention_bias(mask, B, T, S, x.scalar_type(), dev), local;
    if (c.sliding_window)
      local = detail::attention_bias(mask, B, T, S, x.scalar_type(), dev, *c.sliding_window);
    const double scale = c.query_scale > 0 ? 1.0 / std::sqrt(c.query_scale) : 0.0;
    for (size_t l = 0; l < body->layers.size(); ++l) {
      auto& L = body->layers[l];
      auto [q, k, v] = L->self_attn->project(L->input_layernorm(x), c);
      if (c.qk_norm) q = L->self_attn->q_norm(q), k = L->self_attn->k_norm(k);  // per head
      q = q.transpose(1, 2);  // (B, H, T, head_dim)
      k = k.transpose(1, 2);
      v = v.transpose(1, 2);
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
      auto kv = detail::cache_kv(cache, l, k, v);
      torch::Tensor bias = c.local_layer(static_cast<int64_t>(l)) ? local : global;
      torch::Tensor o = detail::attend(q, kv.first, kv.second, bias, scale, c.attn_softcap)
                            .transpose(1, 2)
                            .reshape({B, T, c.num_heads * c.head_dim});
      o = L->self_attn->o_proj(o);
      if (c.sandwich_norms) {  // Gemma-2: x + post(attn(pre(x))), the same around the MLP
        x = x + L->post_attention_layernorm(o);
        x = x + L->post_feedforward_layernorm(L->mlp(L->pre_feedforward_layernorm(x)));
      } else {
        x = x + o;
        x = x + L->mlp(L->post_attention_layernorm(x));
      }
    }
    x = keep_positions(body->norm(x), keep);
    torch::Tensor logits = lm_head ? lm_head(x) : body->embed_tokens->project(x);
    if (c.final_softcap > 0) logits = torch::tanh(logits / c.final_softcap) * c.final_softcap;
    return logits;
  }

  std::vector<std::pair<std::string, Linear>> linears() override {
    std::vector<std::pair<std::string, Linear>> out;
    for (size_t l = 0; l < body->layers.size(); ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      auto& A = body->layers[l]->self_attn;
      auto& M = body->layers[l]->mlp;
      for (auto [name, lin] : {std::pair<const char*, Linear>{"self_attn.q_proj", A->q_proj},
                               {"self_attn.k_proj", A->k_proj},
                               {"self_attn.v_proj", A->v_proj},
                               {"self_attn.qkv_proj", A->qkv_proj},
                               {"self_attn.o_proj", A->o_proj},
                               {"mlp.gate_proj", M->gate_proj},
                               {"mlp.up_proj", M->up_proj},
                               {"mlp.gate_up_proj", M->gate_up_proj},
                               {"mlp.down_proj", M->down_proj}})
        if (lin) out.emplace_back(p + name, lin);
    }
    if (lm_head) out.emplace_back("lm_head", lm_head);
    return out;
  }

 private:
  // cos, sin (B, 1, T, head_dim) of positions pos (B, T), fp32 like HF, then cast to `dtype`.
  // longrope: the long factors once the batch's positions reach original_max_position_embeddings
  // (max position + 1 > it, as HF decides per forward), cos and sin times the attention factor.
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& pos, torch::Dtype dtype) {
    torch::Tensor inv = inv_freq;
    double mscale = 1.0;
    if (inv_freq_long.defined()) {
      mscale = rope_attention_factor(cfg_);
      if (pos.numel() > 0 &&
          pos.max().item<int64_t>() + 1 > cfg_.rope_scaling->original_max_position_embeddings)
        inv = inv_freq_long;
    }
    torch::Tensor freqs =
        pos.to(torch::kFloat32).unsqueeze(-1) * inv.to(pos.device()).view({1, 1, -1});
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    return {(emb.cos() * mscale).unsqueeze(1).to(dtype),
            (emb.sin() * mscale).unsqueeze(1).to(dtype)};
  }

  LlamaBody body{nullptr};
  Linear lm_head{nullptr};
  torch::Tensor inv_freq, inv_freq_long;
};

}  // namespace

CausalLM make_llama(const ModelConfig& cfg) {
  return std::make_shared<LlamaImpl>(cfg);
}

}  // namespace dpft::model
