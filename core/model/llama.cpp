// Llama (Touvron et al. 2023; Llama-3 RoPE scaling), Qwen2 and Qwen3 as HF's LlamaForCausalLM /
// Qwen2ForCausalLM / Qwen3ForCausalLM: RMSNorm pre-norm blocks, rotary position embeddings
// (rotate-half form, base rope_theta), grouped-query attention, SwiGLU MLP
// down(silu(gate(x)) * up(x)), q/k/v biases for Qwen2, for Qwen3 an RMSNorm over each head's
// query and key (q_norm, k_norm: weights (head_dim)) before the rotation, tied or untied lm_head.
#include <cmath>

#include "core/model/transformer.hpp"

namespace dpft::model {

namespace {

// Rotary inverse frequencies (head_dim / 2,), with Llama-3 scaling when configured:
// wavelengths shorter than orig/high_freq_factor keep their frequency, longer than
// orig/low_freq_factor are divided by `factor`, and those between are interpolated.
torch::Tensor rope_inv_freq(const ModelConfig& c) {
  int64_t half = c.head_dim / 2;
  torch::Tensor idx =
      torch::arange(0, half, torch::kFloat64) * 2.0 / static_cast<double>(c.head_dim);
  torch::Tensor inv = 1.0 / torch::pow(torch::full({}, c.rope_theta, torch::kFloat64), idx);
  if (c.rope_scaling) {
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

torch::Tensor rotate_half(const torch::Tensor& x) {
  int64_t h = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, h), x.slice(-1, 0, h)}, -1);
}

struct LlamaAttentionImpl : torch::nn::Module {
  LlamaAttentionImpl(const ModelConfig& c) {
    q_proj = register_module("q_proj",
                             Linear(c.hidden_size, c.num_heads * c.head_dim, c.attention_bias));
    k_proj = register_module("k_proj",
                             Linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.attention_bias));
    v_proj = register_module("v_proj",
                             Linear(c.hidden_size, c.num_kv_heads * c.head_dim, c.attention_bias));
    o_proj = register_module("o_proj", Linear(c.num_heads * c.head_dim, c.hidden_size, false));
    if (c.qk_norm) {
      q_norm = register_module("q_norm", Norm(c.head_dim, c.norm_eps, true));
      k_norm = register_module("k_norm", Norm(c.head_dim, c.norm_eps, true));
    }
  }
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};  // qwen3 only
};
TORCH_MODULE(LlamaAttention);

struct LlamaMLPImpl : torch::nn::Module {
  LlamaMLPImpl(const ModelConfig& c) {
    gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, false));
    up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, false));
    down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, false));
  }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

struct LlamaLayerImpl : torch::nn::Module {
  LlamaLayerImpl(const ModelConfig& c) {
    input_layernorm = register_module("input_layernorm", Norm(c.hidden_size, c.norm_eps, true));
    self_attn = register_module("self_attn", LlamaAttention(c));
    post_attention_layernorm =
        register_module("post_attention_layernorm", Norm(c.hidden_size, c.norm_eps, true));
    mlp = register_module("mlp", LlamaMLP(c));
  }
  Norm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
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
    norm = register_module("norm", Norm(c.hidden_size, c.norm_eps, true));
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
    inv_freq = register_buffer("inv_freq", rope_inv_freq(c));
  }

  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask, KVCache* cache,
                        HeadPositions keep) override {
    const ModelConfig& c = cfg_;
    int64_t B = ids.size(0), T = ids.size(1), S = (cache ? cache->length() : 0) + T;
    auto dev = ids.device();
    torch::Tensor x = body->embed_tokens(ids);
    torch::Tensor pos = detail::position_ids(mask, B, T, S, dev);
    // cos/sin (B, 1, T, head_dim), fp32 like HF, then cast.
    torch::Tensor freqs = pos.to(torch::kFloat32).unsqueeze(-1) * inv_freq.to(dev).view({1, 1, -1});
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    torch::Tensor cos = emb.cos().unsqueeze(1).to(x.scalar_type()),
                  sin = emb.sin().unsqueeze(1).to(x.scalar_type());
    torch::Tensor bias = detail::attention_bias(mask, B, T, S, x.scalar_type(), dev);
    for (size_t l = 0; l < body->layers.size(); ++l) {
      auto& L = body->layers[l];
      torch::Tensor a = L->input_layernorm(x);
      torch::Tensor q = L->self_attn->q_proj(a).view({B, T, c.num_heads, c.head_dim});
      torch::Tensor k = L->self_attn->k_proj(a).view({B, T, c.num_kv_heads, c.head_dim});
      if (c.qk_norm) q = L->self_attn->q_norm(q), k = L->self_attn->k_norm(k);  // per head
      q = q.transpose(1, 2);  // (B, H, T, head_dim)
      k = k.transpose(1, 2);
      torch::Tensor v =
          L->self_attn->v_proj(a).view({B, T, c.num_kv_heads, c.head_dim}).transpose(1, 2);
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
      auto kv = detail::cache_kv(cache, l, k, v);
      torch::Tensor o = detail::attend(q, kv.first, kv.second, bias)
                            .transpose(1, 2)
                            .reshape({B, T, c.num_heads * c.head_dim});
      x = x + L->self_attn->o_proj(o);
      torch::Tensor h = L->post_attention_layernorm(x);
      x = x + L->mlp->down_proj(torch::silu(L->mlp->gate_proj(h)) * L->mlp->up_proj(h));
    }
    x = keep_positions(body->norm(x), keep);
    return lm_head ? lm_head(x) : body->embed_tokens->project(x);
  }

  std::vector<std::pair<std::string, Linear>> linears() override {
    std::vector<std::pair<std::string, Linear>> out;
    for (size_t l = 0; l < body->layers.size(); ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      auto& L = body->layers[l];
      out.emplace_back(p + "self_attn.q_proj", L->self_attn->q_proj);
      out.emplace_back(p + "self_attn.k_proj", L->self_attn->k_proj);
      out.emplace_back(p + "self_attn.v_proj", L->self_attn->v_proj);
      out.emplace_back(p + "self_attn.o_proj", L->self_attn->o_proj);
      out.emplace_back(p + "mlp.gate_proj", L->mlp->gate_proj);
      out.emplace_back(p + "mlp.up_proj", L->mlp->up_proj);
      out.emplace_back(p + "mlp.down_proj", L->mlp->down_proj);
    }
    if (lm_head) out.emplace_back("lm_head", lm_head);
    return out;
  }

 private:
  LlamaBody body{nullptr};
  Linear lm_head{nullptr};
  torch::Tensor inv_freq;
};

}  // namespace

CausalLM make_llama(const ModelConfig& cfg) {
  return std::make_shared<LlamaImpl>(cfg);
}

}  // namespace dpft::model
