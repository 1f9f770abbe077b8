#include "core/model/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::model {

void KVCache::select_rows(const torch::Tensor& rows) {
  for (auto& t : k) t = t.index_select(0, rows);
  for (auto& t : v) t = t.index_select(0, rows);
  for (auto& b : kbuf) b = torch::Tensor();  // rebuilt (with the new batch size) on the next append
  for (auto& b : vbuf) b = torch::Tensor();
}

NormImpl::NormImpl(int64_t dim, double e, bool r, bool p) : eps(e), rms(r), plus_one(p) {
  // Gemma's weight is an offset from 1: zeros make the identity scale, as ones do elsewhere.
  weight = register_parameter("weight", plus_one ? torch::zeros({dim}) : torch::ones({dim}));
  if (!rms) bias = register_parameter("bias", torch::zeros({dim}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  torch::Tensor out;
  if (!rms) {
    out = torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
    if (capture) capture->aux = torch::layer_norm(x.detach(), {x.size(-1)}, {}, {}, eps);
  } else {
    // RMSNorm (Zhang & Sennrich 2019), computed in fp32 as HF's LlamaRMSNorm does.
    torch::Tensor xf = x.to(torch::kFloat32);
    torch::Tensor yf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
    torch::Tensor y = yf.to(x.scalar_type());
    // d out / d weight = y either way (Gemma's scale 1 + w), so the capture is the same.
    out = plus_one ? (yf * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type()) : weight * y;
    if (capture) capture->aux = y.detach();
  }
  if (capture) {
    capture->output = out;
    ++capture->calls;
  }
  return out;
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim) {
  weight = register_parameter("weight", torch::randn({num, dim}) * 0.02);
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  torch::Tensor out = torch::embedding(weight, ids);
  if (capture) {
    capture->input = ids;
    capture->output = out;
    ++capture->calls;
  }
  return out;
}

torch::Tensor EmbeddingImpl::project(const torch::Tensor& x) {
  torch::Tensor out = torch::matmul(x, weight.t());
  if (head_capture) {
    head_capture->input = x.detach();
    head_capture->output = out;
    ++head_capture->calls;
  }
  return out;
}

void CausalLMImpl::set_label_names(const std::vector<std::string>& names) {
  DPFT_CHECK_AS(ConfigError, names.size() == cfg_.labels.size(),
                "{} label names for a classifier with {} labels", names.size(), cfg_.labels.size());
  cfg_.labels = names;
}

bool peft_parameter(const std::string& name) {
  return name.find("lora_A") != std::string::npos || name.find("lora_B") != std::string::npos ||
         name.find(".adapter.") != std::string::npos;
}

std::vector<std::string> CausalLMImpl::checkpoint_names() {
  std::vector<std::string> out;
  for (const auto& p : named_parameters(true)) {
    const std::string& n = p.key();
    if (peft_parameter(n)) continue;
    out.push_back(n);
  }
  for (const std::string& b : checkpoint_buffers()) out.push_back(b);
  return out;
}

namespace {
// A checkpoint tensor of the model by name: a parameter or one of checkpoint_buffers().
torch::Tensor checkpoint_tensor(CausalLMImpl& model, const std::string& name) {
  if (auto* p = model.named_parameters(true).find(name)) return *p;
  torch::Tensor* b = model.named_buffers(true).find(name);
  DPFT_CHECK(b, "model has no parameter or buffer '{}'", name);
  return *b;
}
}  // namespace

namespace detail {

torch::Tensor attention_bias(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                             torch::Dtype dtype, torch::Device device, int64_t window) {
  auto opts = torch::TensorOptions().device(device);
  torch::Tensor q_pos = torch::arange(S - T, S, opts.dtype(torch::kInt64)).view({T, 1});
  torch::Tensor k_pos = torch::arange(0, S, opts.dtype(torch::kInt64)).view({1, S});
  torch::Tensor causal = k_pos <= q_pos;
  if (window > 0) causal = causal & (q_pos - k_pos < window);
  torch::Tensor allowed = causal.view({1, 1, T, S}).expand({B, 1, T, S});
  if (mask.defined()) {
    DPFT_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == S,
               "attention_mask must be (B, S) = ({}, {}), got {}", B, S, shape_str(mask.sizes()));
    allowed = allowed & (mask.to(device) != 0).view({B, 1, 1, S});
  }
  // The dtype's lowest finite value (as HF): fully masked rows then softmax to uniform, not NaN.
  double lowest = dtype == torch::kFloat64   ? std::numeric_limits<double>::lowest()
                  : dtype == torch::kFloat16 ? -65504.0
                  : dtype == torch::kBFloat16
                      ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                      : static_cast<double>(std::numeric_limits<float>::lowest());
  torch::Tensor zero = torch::zeros({}, opts.dtype(dtype)),
                neg = torch::full({}, lowest, opts.dtype(dtype));
  return torch::where(allowed, zero, neg);
}

torch::Tensor padding_bias(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                           torch::Dtype dtype, torch::Device dev) {
  auto opts = torch::TensorOptions().device(dev).dtype(dtype);
  if (!mask.defined()) return torch::zeros({B, 1, T, S}, opts);
  DPFT_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == S,
             "attention_mask must be (B, S) = ({}, {}), got {}", B, S, shape_str(mask.sizes()));
  // The same lowest value detail::attention_bias uses: its causal bias with an all-visible
  // query row gives it for this dtype.
  torch::Tensor causal_full = detail::attention_bias(mask, B, S, S, dtype, dev);  // (B,1,S,S)
  return causal_full.slice(2, S - 1, S).expand({B, 1, T, S});  // the last row sees all keys
}

torch::Tensor position_ids(const torch::Tensor& mask, int64_t B, int64_t T, int64_t S,
                           torch::Device device) {
  if (!mask.defined())
    return torch::arange(S - T, S, torch::TensorOptions().dtype(torch::kInt64).device(device))
        .unsqueeze(0)
        .expand({B, T});
  torch::Tensor pos = mask.to(torch::kInt64).cumsum(1) - 1;
  pos = pos.clamp_min(0);
  return pos.slice(1, S - T, S).to(device);
}

torch::Tensor activation(const std::string& name, const torch::Tensor& x) {
  if (name == "gelu") return torch::gelu(x);  // exact: 0.5 x (1 + erf(x / sqrt 2))
  if (name == "gelu_new")                     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x *
           (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
  if (name == "gelu_pytorch_tanh") return torch::gelu(x, "tanh");  // the same function
  if (name == "relu") return torch::relu(x);
  return torch::silu(x);
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& bias, double scale, double softcap) {
  int64_t H = q.size(1), Hkv = k.size(1);
  torch::Tensor kk = k, vv = v;
  if (H != Hkv) {  // grouped-query attention: each kv head serves H / Hkv query heads
    int64_t rep = H / Hkv;
    kk = k.repeat_interleave(rep, 1);
    vv = v.repeat_interleave(rep, 1);
  }
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, kk.transpose(-1, -2)) * scale;
  if (softcap > 0) scores = torch::tanh(scores / softcap) * softcap;
  scores = scores + bias;
  torch::Tensor probs = torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type());
  return torch::matmul(probs, vv);
}

std::pair<torch::Tensor, torch::Tensor> cache_kv(KVCache* cache, size_t layer, torch::Tensor k,
                                                 torch::Tensor v) {
  if (!cache) return {k, v};
  if (cache->k.size() <= layer) {
    cache->k.resize(layer + 1);
    cache->v.resize(layer + 1);
    cache->kbuf.resize(layer + 1);
    cache->vbuf.resize(layer + 1);
  }
  int64_t len = cache->k[layer].defined() ? cache->k[layer].size(2) : 0, T = k.size(2);
  torch::Tensor& kb = cache->kbuf[layer];
  torch::Tensor& vb = cache->vbuf[layer];
  if (!kb.defined() || kb.size(2) < len + T || kb.size(0) != k.size(0)) {
    // Grow geometrically so that appending one token is amortised O(1) copies, not O(S).
    int64_t cap = std::max<int64_t>(2 * (len + T), 64);
    torch::Tensor nk = torch::empty({k.size(0), k.size(1), cap, k.size(3)}, k.options());
    torch::Tensor nv = torch::empty({v.size(0), v.size(1), cap, v.size(3)}, v.options());
    if (len > 0) {
      nk.slice(2, 0, len).copy_(cache->k[layer]);
      nv.slice(2, 0, len).copy_(cache->v[layer]);
    }
    kb = nk;
    vb = nv;
  }
  kb.slice(2, len, len + T).copy_(k);
  vb.slice(2, len, len + T).copy_(v);
  cache->k[layer] = kb.slice(2, 0, len + T);
  cache->v[layer] = vb.slice(2, 0, len + T);
  return {cache->k[layer], cache->v[layer]};
}

}  // namespace detail

CausalLM make_gpt2(const ModelConfig& cfg);   // gpt2.cpp
CausalLM make_llama(const ModelConfig& cfg);  // llama.cpp (llama, qwen2, qwen3)
CausalLM make_bert(const ModelConfig& cfg);   // bert.cpp (bert, roberta)
CausalLM make_bart(const ModelConfig& cfg);   // bart.cpp

void CausalLMImpl::add_adapters(int64_t, torch::Generator*) {
  throw ConfigError(fmt::format(
      "model.peft.kind adapter: bottleneck adapters are built for encoders (bert, roberta); "
      "this is a {} model: use lora or full",
      cfg_.model_type));
}

CausalLM make_causal_lm(const ModelConfig& cfg, uint64_t seed) {
  cfg.validate("model config");
  torch::manual_seed(seed);
  CausalLM m = cfg.is_gpt2()      ? make_gpt2(cfg)
               : cfg.is_encoder() ? make_bert(cfg)
               : cfg.is_seq2seq() ? make_bart(cfg)
                                  : make_llama(cfg);
  // HF _init_weights: Linear/Embedding weights ~ N(0, 0.02), biases 0, norms 1.
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters(true)) {
    const std::string& n = p.key();
    if (n.find("lora_") != std::string::npos) continue;
    bool norm = n.find("ln_") != std::string::npos || n.find("norm") != std::string::npos ||
                n.find("LayerNorm") != std::string::npos;
    if (norm) continue;  // ones / zeros from the constructors
    if (n.size() >= 5 && n.compare(n.size() - 5, 5, ".bias") == 0)
      p.value().zero_();
    else
      p.value().normal_(0.0, 0.02);
  }
  return m;
}

void load_weights(CausalLM& model, const std::function<torch::Tensor(const std::string&)>& get,
                  const std::string& what) {
  torch::NoGradGuard ng;
  for (const std::string& name : model->checkpoint_names()) {
    torch::Tensor src = get(name);
    // A saved base model (GPT2Model, BertModel, RobertaModel, BartModel) lacks the prefix.
    for (const char* prefix : {"transformer.", "bert.", "roberta.", "model."})
      if (!src.defined() && name.rfind(prefix, 0) == 0) src = get(name.substr(strlen(prefix)));
    // BART's shared embeddings may be stored under any of the names tied to them.
    if (name == "model.shared.weight")
      for (const char* tied : {"model.encoder.embed_tokens.weight",
                               "model.decoder.embed_tokens.weight", "lm_head.weight"})
        if (!src.defined()) src = get(tied);
    if (!src.defined())
      throw InputError(fmt::format("{}: tensor '{}' is missing (model_type {})", what, name,
                                   model->config().model_type));
    torch::Tensor dst = checkpoint_tensor(*model, name);
    if (!src.is_floating_point())  // before the shape: an int tensor is never a weight
      throw InputError(fmt::format("{}: tensor '{}' has dtype {}; model weights must be F32, F16 "
                                   "or BF16 (quantised checkpoints are not supported)",
                                   what, name, c10::toString(src.scalar_type())));
    if (model->stored_transposed(name)) src = src.t();
    if (src.sizes() != dst.sizes())
      throw InputError(fmt::format("{}: tensor '{}' has shape {} but config.json implies {}", what,
                                   name, shape_str(src.sizes()), shape_str(dst.sizes())));
    dst.copy_(src.to(dst.scalar_type()));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> export_weights(CausalLM& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const std::string& name : model->checkpoint_names()) {
    torch::Tensor t = checkpoint_tensor(*model, name).detach().to(torch::kCPU);
    if (model->stored_transposed(name)) t = t.t();
    out.emplace_back(name, t.contiguous().clone());  // a copy: never aliases the live parameter
  }
  return out;
}

namespace {

// nll[i] = -log_softmax(z[i, :])[y[i]] for z (N, V) and y (N), computed over chunks of rows
// in float32 so that no (N, V) temporary is ever made: the forward keeps one chunk of
// log_softmax at a time, and the backward writes d nll / d z = softmax(z[i]) - onehot(y[i])
// (scaled by the incoming grad) straight into the one (N, V) gradient it returns. Autograd's
// log_softmax + gather keeps the whole (N, V) log_softmax and makes two more (N, V) buffers in
// its backward (tests/test_model.cpp checks values and gradients against it).
class NextTokenNll : public torch::autograd::Function<NextTokenNll> {
 public:
  static constexpr int64_t kChunkElements = int64_t{1} << 23;  // 32 MB of float32 per chunk

  static int64_t chunk_rows(int64_t V) {
    return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(V, 1));
  }

  // z: (N, V) floating, contiguous; y: (N) int64 in [0, V) -> (N) float32
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& z,
                               const torch::Tensor& y) {
    const int64_t N = z.size(0), step = chunk_rows(z.size(1));
    torch::Tensor nll = torch::empty({N}, z.options().dtype(torch::kFloat32));
    for (int64_t s = 0; s < N; s += step) {
      const int64_t e = std::min(N, s + step);
      torch::Tensor ls = torch::log_softmax(z.slice(0, s, e).to(torch::kFloat32), 1);
      nll.slice(0, s, e).copy_(ls.gather(1, y.slice(0, s, e).unsqueeze(1)).squeeze(1).neg_());
    }
    ctx->save_for_backward({z, y});
    return nll;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &z = saved[0], &y = saved[1];
    torch::Tensor g = grad_out[0].to(torch::kFloat32).contiguous();  // (N)
    const int64_t N = z.size(0), step = chunk_rows(z.size(1));
    torch::Tensor dz = torch::empty_like(z);
    for (int64_t s = 0; s < N; s += step) {
      const int64_t e = std::min(N, s + step);
      torch::Tensor zc = z.slice(0, s, e), out = dz.slice(0, s, e);
      torch::Tensor gc = g.slice(0, s, e).unsqueeze(1);
      if (z.scalar_type() == torch::kFloat32)
        torch::_softmax_out(out, zc, 1, false).mul_(gc);  // in place in the result
      else
        out.copy_(torch::softmax(zc.to(torch::kFloat32), 1).mul_(gc));
    }
    dz.scatter_add_(1, y.unsqueeze(1), (-g).unsqueeze(1).to(dz.scalar_type()));
    return {dz, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CausalLMImpl::keep_positions(const torch::Tensor& x, const HeadPositions& keep) {
  if (keep.index.defined()) {
    DPFT_CHECK(keep.index.dim() == 2 && keep.index.size(0) == x.size(0) &&
                   keep.index.scalar_type() == torch::kInt64,
               "head positions: index must be (B, T') int64 with B = {}, got {}", x.size(0),
               shape_str(keep.index.sizes()));
    torch::Tensor idx = keep.index.to(x.device());
    return x.gather(1, idx.unsqueeze(-1).expand({-1, -1, x.size(2)}));
  }
  return keep.last > 0 && keep.last < x.size(1) ? x.slice(1, x.size(1) - keep.last) : x;
}

namespace {
// tgt[b, t] = labels[b, t + 1]: the token position t predicts; the last position predicts nothing
// (ignore_index). labels (B, T) -> (B, T).
torch::Tensor next_token_targets(const torch::Tensor& labels, int64_t ignore_index) {
  const int64_t B = labels.size(0), T = labels.size(1);
  return torch::cat({labels.slice(1, 1, T), torch::full({B, 1}, ignore_index, labels.options())},
                    1);
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> scored_positions(const torch::Tensor& labels,
                                                         int64_t ignore_index) {
  DPFT_CHECK(labels.dim() == 2, "scored_positions: labels (B, T) expected, got {}",
             shape_str(labels.sizes()));
  const int64_t B = labels.size(0), T = labels.size(1);
  torch::Tensor tgt = next_token_targets(labels, ignore_index);  // (B, T)
  torch::Tensor scored = tgt != ignore_index;  // (B, T)
  const int64_t width = std::max<int64_t>(1, B > 0 ? scored.sum(1).max().item<int64_t>() : 1);
  // Scored positions first, each group in position order: sort by (unscored, t).
  torch::Tensor t = torch::arange(T, labels.options()).unsqueeze(0);  // (1, T)
  torch::Tensor key = (~scored).to(torch::kInt64) * T + t;            // (B, T)
  torch::Tensor order = std::get<1>(key.sort(1)).slice(1, 0, width);  // (B, T')
  torch::Tensor keep = scored.gather(1, order);                       // (B, T')
  torch::Tensor index = torch::where(keep, order, torch::zeros_like(order));
  torch::Tensor targets =
      torch::where(keep, tgt.gather(1, order), torch::full_like(order, ignore_index));
  return {index, targets};
}

NextTokenScores next_token_scores(CausalLMImpl& model, const torch::Tensor& ids,
                                  const torch::Tensor& mask, const torch::Tensor& labels,
                                  bool with_correct, int64_t ignore_index) {
  DPFT_CHECK(labels.sizes() == ids.sizes(),
             "next_token_scores: labels {} must have the shape of the input ids {}",
             shape_str(labels.sizes()), shape_str(ids.sizes()));
  auto [index, targets] = scored_positions(labels, ignore_index);                  // (B, T') each
  torch::Tensor logits = model.forward(ids, mask, nullptr, HeadPositions(index));  // (B, T', V)
  const int64_t B = logits.size(0), W = logits.size(1), V = logits.size(2);
  torch::Tensor valid = targets != ignore_index;  // (B, T')
  torch::Tensor safe = torch::where(valid, targets, torch::zeros_like(targets));
  torch::Tensor nll =
      NextTokenNll::apply(logits.contiguous().view({B * W, V}), safe.reshape({B * W})).view({B, W});
  NextTokenScores s;
  s.tokens = valid.sum(1);  // (B) int64
  s.loss = (nll * valid.to(torch::kFloat32)).sum(1) / s.tokens.clamp_min(1).to(torch::kFloat32);
  if (with_correct) s.correct = ((logits.argmax(-1) == targets) & valid).sum(1);
  return s;
}

std::pair<torch::Tensor, torch::Tensor> per_token_loss(const torch::Tensor& logits,
                                                       const torch::Tensor& labels,
                                                       int64_t ignore_index) {
  DPFT_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                 logits.size(1) == labels.size(1),
             "per_token_loss: logits (B, T, V) and labels (B, T) expected, got {} and {}",
             shape_str(logits.sizes()), shape_str(labels.sizes()));
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  // Scoring all T positions keeps the logits unsliced (no (B, T - 1, V) copy).
  torch::Tensor tgt = next_token_targets(labels, ignore_index);  // (B, T)
  torch::Tensor mask = (tgt != ignore_index);
  torch::Tensor safe = torch::where(mask, tgt, torch::zeros_like(tgt));
  torch::Tensor nll =
      NextTokenNll::apply(logits.contiguous().view({B * T, V}), safe.reshape({B * T}));
  nll = nll.view({B, T}).slice(1, 0, T - 1) * mask.slice(1, 0, T - 1).to(torch::kFloat32);
  return {nll.contiguous(), mask.slice(1, 0, T - 1).contiguous()};
}

std::pair<torch::Tensor, torch::Tensor> per_sample_loss(const torch::Tensor& logits,
                                                        const torch::Tensor& labels,
                                                        int64_t ignore_index) {
  auto [loss, mask] = per_token_loss(logits, labels, ignore_index);
  torch::Tensor tokens = mask.sum(1);  // (B) int64
  return {loss.sum(1) / tokens.clamp_min(1).to(loss.scalar_type()), tokens};
}

}  // namespace dpft::model
