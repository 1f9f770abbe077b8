// GPT-2 (Radford et al. 2019) as HF's GPT2LMHeadModel: learned positions, pre-LayerNorm
// blocks, fused q/k/v projection `c_attn`, gelu_new MLP, final LayerNorm, lm_head tied to wte.
// HF stores the Conv1D weights (c_attn, c_proj, c_fc) as (in, out); we hold (out, in).
#include <cmath>

#include "core/model/transformer.hpp"

namespace dpft::model {

namespace {

struct GPT2AttentionImpl : torch::nn::Module {
  GPT2AttentionImpl(const ModelConfig& c) : heads(c.num_heads), hd(c.head_dim) {
    c_attn = register_module("c_attn", Linear(c.hidden_size, 3 * c.hidden_size, true));
    c_proj = register_module("c_proj", Linear(c.hidden_size, c.hidden_size, true));
  }
  int64_t heads, hd;
  Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(GPT2Attention);

struct GPT2MLPImpl : torch::nn::Module {
  GPT2MLPImpl(const ModelConfig& c) {
    c_fc = register_module("c_fc", Linear(c.hidden_size, c.intermediate_size, true));
    c_proj = register_module("c_proj", Linear(c.intermediate_size, c.hidden_size, true));
  }
  Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(GPT2MLP);

struct GPT2BlockImpl : torch::nn::Module {
  GPT2BlockImpl(const ModelConfig& c) {
    ln_1 = register_module("ln_1", Norm(c.hidden_size, c.norm_eps, false));
    attn = register_module("attn", GPT2Attention(c));
    ln_2 = register_module("ln_2", Norm(c.hidden_size, c.norm_eps, false));
    mlp = register_module("mlp", GPT2MLP(c));
  }
  Norm ln_1{nullptr}, ln_2{nullptr};
  GPT2Attention attn{nullptr};
  GPT2MLP mlp{nullptr};
};
TORCH_MODULE(GPT2Block);

struct GPT2BodyImpl : torch::nn::Module {
  GPT2BodyImpl(const ModelConfig& c) {
    wte = register_module("wte", Embedding(c.vocab_size, c.hidden_size));
    wpe = register_module("wpe", Embedding(c.max_position, c.hidden_size));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      blocks.push_back(GPT2Block(c));
      h->push_back(blocks.back());
    }
    ln_f = register_module("ln_f", Norm(c.hidden_size, c.norm_eps, false));
  }
  Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  std::vector<GPT2Block> blocks;
  Norm ln_f{nullptr};
};
TORCH_MODULE(GPT2Body);

class GPT2Impl : public CausalLMImpl {
 public:
  explicit GPT2Impl(const ModelConfig& c) : CausalLMImpl(c) {
    body = register_module("transformer", GPT2Body(c));
    if (!c.tie_word_embeddings)
      lm_head = register_module("lm_head", Linear(c.hidden_size, c.vocab_size, false));
  }

  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask, KVCache* cache,
                        HeadPositions keep) override {
    int64_t B = ids.size(0), T = ids.size(1), S = (cache ? cache->length() : 0) + T;
    auto dev = ids.device();
    torch::Tensor pos = detail::position_ids(mask, B, T, S, dev);
    torch::Tensor x = body->wte(ids) + body->wpe(pos);
    torch::Tensor bias = detail::attention_bias(mask, B, T, S, x.scalar_type(), dev);
    for (size_t l = 0; l < body->blocks.size(); ++l) {
      auto& blk = body->blocks[l];
      torch::Tensor a = blk->ln_1(x);
      auto qkv = blk->attn->c_attn(a).split(cfg_.hidden_size, -1);  // 3 x (B, T, d)
      auto heads = [&](const torch::Tensor& t) {
        return t.view({B, T, cfg_.num_heads, cfg_.head_dim}).transpose(1, 2);
      };
      torch::Tensor q = heads(qkv[0]);
      auto [k, v] = detail::cache_kv(cache, l, heads(qkv[1]), heads(qkv[2]));
      torch::Tensor o =
          detail::attend(q, k, v, bias).transpose(1, 2).reshape({B, T, cfg_.hidden_size});
      x = x + blk->attn->c_proj(o);
      torch::Tensor m =
          blk->mlp->c_proj(detail::activation(cfg_.activation, blk->mlp->c_fc(blk->ln_2(x))));
      x = x + m;
    }
    x = keep_positions(body->ln_f(x), keep);
    return lm_head ? lm_head(x) : body->wte->project(x);
  }

  std::vector<std::pair<std::string, Linear>> linears() override {
    std::vector<std::pair<std::string, Linear>> out;
    for (size_t l = 0; l < body->blocks.size(); ++l) {
      std::string p = "transformer.h." + std::to_string(l) + ".";
      auto& b = body->blocks[l];
      out.emplace_back(p + "attn.c_attn", b->attn->c_attn);
      out.emplace_back(p + "attn.c_proj", b->attn->c_proj);
      out.emplace_back(p + "mlp.c_fc", b->mlp->c_fc);
      out.emplace_back(p + "mlp.c_proj", b->mlp->c_proj);
    }
    if (lm_head) out.emplace_back("lm_head", lm_head);
    return out;
  }

  bool stored_transposed(const std::string& n) const override {
    auto ends = [&](const char* s) {
      std::string t(s);
      return n.size() >= t.size() && n.compare(n.size() - t.size(), t.size(), t) == 0;
    };
    return ends("attn.c_attn.weight") || ends("attn.c_proj.weight") || ends("mlp.c_fc.weight") ||
           ends("mlp.c_proj.weight");
  }

 private:
  GPT2Body body{nullptr};
  Linear lm_head{nullptr};
};

}  // namespace

CausalLM make_gpt2(const ModelConfig& cfg) {
  return std::make_shared<GPT2Impl>(cfg);
}

}  // namespace dpft::model
