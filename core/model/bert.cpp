// BERT and RoBERTa encoders with their heads (encoder.hpp says what they compute).
#include <fmt/format.h>

#include <limits>

#include "core/model/encoder.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::model {

namespace {

struct BertEmbeddingsImpl : torch::nn::Module {
  explicit BertEmbeddingsImpl(const ModelConfig& c) {
    word_embeddings = register_module("word_embeddings", Embedding(c.vocab_size, c.hidden_size));
    position_embeddings =
        register_module("position_embeddings", Embedding(c.max_position, c.hidden_size));
    token_type_embeddings =
        register_module("token_type_embeddings", Embedding(c.type_vocab_size, c.hidden_size));
    LayerNorm = register_module("LayerNorm", Norm(c.hidden_size, c.norm_eps, false));
  }
  Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  Norm LayerNorm{nullptr};
};
TORCH_MODULE(BertEmbeddings);

struct BertSelfAttentionImpl : torch::nn::Module {
  explicit BertSelfAttentionImpl(const ModelConfig& c) {
    query = register_module("query", Linear(c.hidden_size, c.hidden_size, true));
    key = register_module("key", Linear(c.hidden_size, c.hidden_size, true));
    value = register_module("value", Linear(c.hidden_size, c.hidden_size, true));
  }
  Linear query{nullptr}, key{nullptr}, value{nullptr};
};
TORCH_MODULE(BertSelfAttention);

// A Houlsby et al. (2019) bottleneck adapter as DP-SFT's Adapter-DP configures it (LayerNorm
// before, relu): a(h) = h + up(relu(down(LN(h)))), down (m, d), up (d, m). down ~ N(0, 0.02)
// (HF's init), up = 0: a starts as the identity, so the adapted model starts equal to the base.
struct BottleneckImpl : torch::nn::Module {
  BottleneckImpl(int64_t d, int64_t m, double eps, torch::Generator* gen) {
    norm = register_module("norm", Norm(d, eps, false));
    down = register_module("down", Linear(d, m, true));
    up = register_module("up", Linear(m, d, true));
    torch::NoGradGuard ng;
    torch::Tensor w = torch::empty({m, d});  // drawn in float32 on the CPU, as LoRA's A
    if (gen)
      w.normal_(0, 0.02, *gen);
    else
      w.normal_(0, 0.02);
    down->weight.copy_(w);
    down->bias.zero_();
    up->weight.zero_();
    up->bias.zero_();
  }
  torch::Tensor forward(const torch::Tensor& h) {  // (..., d)
    return h + up(torch::relu(down(norm(h))));
  }
  Norm norm{nullptr};
  Linear down{nullptr}, up{nullptr};
};
TORCH_MODULE(Bottleneck);

// dense + LayerNorm after a residual: BertSelfOutput and BertOutput. With an adapter
// (model.peft.kind adapter), Houlsby's placement: x = LN(x + adapter(dense(h))).
struct BertResidualOutImpl : torch::nn::Module {
  BertResidualOutImpl(const ModelConfig& c, int64_t in) {
    dense = register_module("dense", Linear(in, c.hidden_size, true));
    LayerNorm = register_module("LayerNorm", Norm(c.hidden_size, c.norm_eps, false));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& h) {
    torch::Tensor y = dense(h);
    if (!adapter.is_empty()) y = adapter(y);
    return LayerNorm(x + y);
  }
  void add_adapter(int64_t m, double eps, torch::Generator* gen) {
    DPFT_CHECK(adapter.is_empty(), "this layer already has an adapter");
    adapter = register_module("adapter", Bottleneck(dense->weight.size(0), m, eps, gen));
    adapter->to(dense->weight.device(), dense->weight.scalar_type());
  }
  Linear dense{nullptr};
  Norm LayerNorm{nullptr};
  Bottleneck adapter{nullptr};
};
TORCH_MODULE(BertResidualOut);

struct BertAttentionImpl : torch::nn::Module {
  explicit BertAttentionImpl(const ModelConfig& c) {
    self = register_module("self", BertSelfAttention(c));
    output = register_module("output", BertResidualOut(c, c.hidden_size));
  }
  BertSelfAttention self{nullptr};
  BertResidualOut output{nullptr};
};
TORCH_MODULE(BertAttention);

struct BertDenseImpl : torch::nn::Module {  // BertIntermediate, BertPooler: one dense layer
  BertDenseImpl(int64_t in, int64_t out) {
    dense = register_module("dense", Linear(in, out, true));
  }
  Linear dense{nullptr};
};
TORCH_MODULE(BertDense);

struct BertLayerImpl : torch::nn::Module {
  explicit BertLayerImpl(const ModelConfig& c) {
    attention = register_module("attention", BertAttention(c));
    intermediate = register_module("intermediate", BertDense(c.hidden_size, c.intermediate_size));
    output = register_module("output", BertResidualOut(c, c.intermediate_size));
  }
  BertAttention attention{nullptr};
  BertDense intermediate{nullptr};
  BertResidualOut output{nullptr};
};
TORCH_MODULE(BertLayer);

struct BertBodyImpl : torch::nn::Module {  // BertModel / RobertaModel
  BertBodyImpl(const ModelConfig& c, bool pooler_layer) {
    embeddings = register_module("embeddings", BertEmbeddings(c));
    encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
    auto list = encoder->register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers.push_back(BertLayer(c));
      list->push_back(layers.back());
    }
    if (pooler_layer) pooler = register_module("pooler", BertDense(c.hidden_size, c.hidden_size));
  }
  BertEmbeddings embeddings{nullptr};
  std::shared_ptr<torch::nn::Module> encoder;
  std::vector<BertLayer> layers;
  BertDense pooler{nullptr};
};
TORCH_MODULE(BertBody);

// BERT's cls.predictions and RoBERTa's lm_head: dense, activation, LayerNorm, then the tied
// word embeddings (or an own decoder) plus a vocabulary bias.
struct LmHeadImpl : torch::nn::Module, OutputBiasHost {
  LmHeadImpl(const ModelConfig& c, bool bert) {
    std::shared_ptr<torch::nn::Module> t = nullptr;
    if (bert) t = register_module("transform", std::make_shared<torch::nn::Module>());
    torch::nn::Module& host = bert ? *t : *this;
    dense = host.register_module("dense", Linear(c.hidden_size, c.hidden_size, true));
    norm = host.register_module(bert ? "LayerNorm" : "layer_norm",
                                Norm(c.hidden_size, c.norm_eps, false));
    transform = t;
    if (!c.tie_word_embeddings)
      decoder = register_module("decoder", Linear(c.hidden_size, c.vocab_size, false));
    bias = register_parameter("bias", torch::zeros({c.vocab_size}));
  }
  torch::Tensor output_bias() const override { return bias; }
  // logits (B, T, V) + bias, recorded for the per-sample engine.
  torch::Tensor add_bias(const torch::Tensor& logits) {
    torch::Tensor out = logits + bias;
    if (bias_capture) {
      bias_capture->output = out;
      ++bias_capture->calls;
    }
    return out;
  }
  std::shared_ptr<torch::nn::Module> transform;
  Linear dense{nullptr}, decoder{nullptr};
  Norm norm{nullptr};
  torch::Tensor bias;
};
TORCH_MODULE(LmHead);

class BertImpl : public EncoderImpl {
 public:
  explicit BertImpl(const ModelConfig& c)
      : EncoderImpl(c), roberta_(c.model_type == "roberta"), prefix_(c.model_type + ".") {
    const bool bert_pooler = !roberta_ && c.head == EncoderHead::kSequenceClassification;
    body = register_module(c.model_type, BertBody(c, bert_pooler));
    if (c.head == EncoderHead::kSequenceClassification) {
      if (roberta_) {
        auto cls = register_module("classifier", std::make_shared<torch::nn::Module>());
        cls_dense = cls->register_module("dense", Linear(c.hidden_size, c.hidden_size, true));
        cls_out = cls->register_module("out_proj", Linear(c.hidden_size, c.num_labels(), true));
        classifier_ = cls;
      } else {
        cls_out = register_module("classifier", Linear(c.hidden_size, c.num_labels(), true));
      }
    } else if (c.head == EncoderHead::kMaskedLM || c.head == EncoderHead::kCausalLM) {
      if (roberta_) {
        lm = register_module("lm_head", LmHead(c, false));
      } else {
        auto cls = register_module("cls", std::make_shared<torch::nn::Module>());
        lm = cls->register_module("predictions", LmHead(c, true));
        cls_ = cls;
      }
    }
  }

  torch::Tensor encode(const torch::Tensor& ids, const torch::Tensor& mask,
                       const torch::Tensor& token_type_ids) override {
    return run(ids, mask, token_type_ids, nullptr);
  }

  torch::Tensor classify(const torch::Tensor& ids, const torch::Tensor& mask,
                         const torch::Tensor& token_type_ids) override {
    DPFT_CHECK_AS(ConfigError, cfg_.head == EncoderHead::kSequenceClassification,
                  "this {} model has no sequence-classification head (config.json architectures "
                  "names another); use a ...ForSequenceClassification checkpoint or `dpft model "
                  "init --head classification`",
                  cfg_.model_type);
    torch::Tensor h0 = run(ids, mask, token_type_ids, nullptr).select(1, 0);  // (B, d)
    if (roberta_) return cls_out(torch::tanh(cls_dense(h0)));
    return cls_out(torch::tanh(body->pooler->dense(h0)));
  }

  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask, KVCache* cache,
                        HeadPositions keep) override {
    DPFT_CHECK_AS(
        ConfigError, cfg_.head == EncoderHead::kMaskedLM || cfg_.head == EncoderHead::kCausalLM,
        "this {} model has no language-model head (it is a {}); token logits need a "
        "...ForMaskedLM or a causal (is_decoder) checkpoint",
        cfg_.model_type, cfg_.head == EncoderHead::kNone ? "base encoder" : "sequence classifier");
    DPFT_CHECK_AS(ConfigError, !cache || cfg_.is_decoder,
                  "a key/value cache needs a causal model (is_decoder); a masked LM sees the "
                  "whole sequence");
    return lm_head(keep_positions(run(ids, mask, torch::Tensor(), cache), keep));
  }

  // After the attention output projection and after the FFN output projection of every layer.
  void add_adapters(int64_t bottleneck, torch::Generator* gen) override {
    DPFT_CHECK_AS(ConfigError, bottleneck >= 1, "adapter width {} must be at least 1", bottleneck);
    for (auto& b : body->layers) {
      b->attention->output->add_adapter(bottleneck, cfg_.norm_eps, gen);
      b->output->add_adapter(bottleneck, cfg_.norm_eps, gen);
    }
  }

  torch::Tensor lm_head(const torch::Tensor& hidden) override {
    DPFT_CHECK_AS(ConfigError, lm, "this {} model has no language-model head", cfg_.model_type);
    torch::Tensor x = lm->norm(detail::activation(cfg_.activation, lm->dense(hidden)));
    torch::Tensor logits =
        lm->decoder ? lm->decoder(x) : body->embeddings->word_embeddings->project(x);
    return lm->add_bias(logits);
  }

  std::vector<std::pair<std::string, Linear>> linears() override {
    std::vector<std::pair<std::string, Linear>> out;
    for (size_t l = 0; l < body->layers.size(); ++l) {
      const std::string p = prefix_ + "encoder.layer." + std::to_string(l) + ".";
      auto& b = body->layers[l];
      out.emplace_back(p + "attention.self.query", b->attention->self->query);
      out.emplace_back(p + "attention.self.key", b->attention->self->key);
      out.emplace_back(p + "attention.self.value", b->attention->self->value);
      out.emplace_back(p + "attention.output.dense", b->attention->output->dense);
      out.emplace_back(p + "intermediate.dense", b->intermediate->dense);
      out.emplace_back(p + "output.dense", b->output->dense);
    }
    if (body->pooler) out.emplace_back(prefix_ + "pooler.dense", body->pooler->dense);
    if (cls_dense) out.emplace_back("classifier.dense", cls_dense);
    if (cls_out) out.emplace_back(roberta_ ? "classifier.out_proj" : "classifier", cls_out);
    if (lm) {
      const std::string h = roberta_ ? "lm_head." : "cls.predictions.";
      out.emplace_back(h + (roberta_ ? "dense" : "transform.dense"), lm->dense);
      if (lm->decoder) out.emplace_back(h + "decoder", lm->decoder);
    }
    return out;
  }

 private:
  // Embeddings and the blocks: (B, T, d). With a cache (causal models), positions continue from
  // the cached length and the mask covers cache + new tokens.
  torch::Tensor run(const torch::Tensor& ids, const torch::Tensor& mask, const torch::Tensor& tt,
                    KVCache* cache) {
    DPFT_CHECK(ids.dim() == 2, "input_ids must be (B, T), got {}", shape_str(ids.sizes()));
    const int64_t B = ids.size(0), T = ids.size(1), past = cache ? cache->length() : 0,
                  S = past + T;
    const auto dev = ids.device();
    DPFT_CHECK_AS(InputError, S <= cfg_.usable_positions(),
                  "a sequence of {} tokens exceeds the {} positions this {} model has; truncate "
                  "to at most {} (data.max_length)",
                  S, cfg_.usable_positions(), cfg_.model_type, cfg_.usable_positions());
    torch::Tensor pos;
    if (roberta_) {
      const int64_t pad = cfg_.pad_token_id.value_or(1);
      torch::Tensor real = (ids != pad).to(torch::kInt64);
      pos = (real.cumsum(1) + past) * real + pad;
    } else {
      pos = torch::arange(past, S, torch::TensorOptions().dtype(torch::kInt64).device(dev))
                .unsqueeze(0)
                .expand({B, T});
    }
    auto& e = body->embeddings;
    torch::Tensor types = tt.defined() ? tt.to(dev) : torch::zeros_like(ids);
    if (tt.defined()) {
      DPFT_CHECK(tt.sizes() == ids.sizes(), "token_type_ids must be {} like input_ids, got {}",
                 shape_str(ids.sizes()), shape_str(tt.sizes()));
      DPFT_CHECK_AS(InputError, tt.numel() == 0 || tt.max().item<int64_t>() < cfg_.type_vocab_size,
                    "token type {} but this {} model has {} (type_vocab_size)",
                    tt.max().item<int64_t>(), cfg_.model_type, cfg_.type_vocab_size);
    }
    torch::Tensor x = e->LayerNorm(e->word_embeddings(ids) + e->position_embeddings(pos) +
                                   e->token_type_embeddings(types));
    torch::Tensor bias = cfg_.is_decoder
                             ? detail::attention_bias(mask, B, T, S, x.scalar_type(), dev)
                             : detail::padding_bias(mask, B, T, S, x.scalar_type(), dev);
    auto heads = [&](const torch::Tensor& t) {
      return t.view({B, T, cfg_.num_heads, cfg_.head_dim}).transpose(1, 2);
    };
    for (size_t l = 0; l < body->layers.size(); ++l) {
      auto& b = body->layers[l];
      auto& sa = b->attention->self;
      torch::Tensor q = heads(sa->query(x));
      auto [k, v] = detail::cache_kv(cache, l, heads(sa->key(x)), heads(sa->value(x)));
      torch::Tensor o =
          detail::attend(q, k, v, bias).transpose(1, 2).reshape({B, T, cfg_.hidden_size});
      x = b->attention->output(x, o);
      x = b->output(x, detail::activation(cfg_.activation, b->intermediate->dense(x)));
    }
    return x;
  }

  bool roberta_;
  std::string prefix_;
  BertBody body{nullptr};
  Linear cls_dense{nullptr}, cls_out{nullptr};
  LmHead lm{nullptr};
  std::shared_ptr<torch::nn::Module> classifier_, cls_;
};

}  // namespace

CausalLM make_bert(const ModelConfig& cfg) {
  return std::make_shared<BertImpl>(cfg);
}

Encoder as_encoder(const CausalLM& m) {
  return std::dynamic_pointer_cast<EncoderImpl>(m);
}

torch::Tensor mean_pool_normalize(const torch::Tensor& hidden, const torch::Tensor& mask) {
  DPFT_CHECK(hidden.dim() == 3 && mask.dim() == 2 && mask.size(0) == hidden.size(0) &&
                 mask.size(1) == hidden.size(1),
             "mean_pool_normalize: hidden (B, T, d) and mask (B, T) expected, got {} and {}",
             shape_str(hidden.sizes()), shape_str(mask.sizes()));
  torch::Tensor m = mask.to(hidden.device(), torch::kFloat32).unsqueeze(-1);  // (B, T, 1)
  torch::Tensor sum = (hidden.to(torch::kFloat32) * m).sum(1);
  torch::Tensor mean = sum / m.sum(1).clamp_min(1e-9);   // sentence-transformers' clamp
  return mean / mean.norm(2, 1, true).clamp_min(1e-12);  // F.normalize's eps
}

}  // namespace dpft::model
