#include "core/grad/per_sample.hpp"

#include "core/lm/objective.hpp"

#include <map>

#include "core/model/capture.hpp"
#include "core/model/peft.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::grad {

using torch::Tensor;

// G_b += sum_t U[b,t] V[b,t]^T, U (B, T, m) dense or ids (B, T) one-hot over m; V (B, T, n).
struct PerSampleGrads::Contribution {
  Tensor U, ids, V;
  int64_t m = 0, n = 0;
};

struct PerSampleGrads::ParamState {
  std::vector<Contribution> outer;
  Tensor direct;  // (B, numel): sum of direct contributions
  Tensor G;       // (B, numel) materialised, when computed
  std::string mode;
};

struct PerSampleGrads::Hooked {
  enum Kind { kLinear, kNorm, kEmbedding, kOutputBias } kind;
  std::shared_ptr<torch::nn::Module> module;
  model::Capture cap, head;
};

namespace {

bool trainable(const Tensor& t) {
  return t.defined() && t.requires_grad();
}

Tensor as_float(const Tensor& t) {
  return t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64
             ? t
             : t.to(torch::kFloat32);
}

// (B, T, k) view of an activation or gradient with any number of middle dims.
Tensor btk(const Tensor& t, int64_t B) {
  return t.reshape({B, -1, t.size(-1)});
}

// Gram of the u-side of two contributions: (B, Ti, Tj) with entry u_{b,t} . u'_{b,s}.
Tensor u_gram(const PerSampleGrads::Contribution& a, const PerSampleGrads::Contribution& b) {
  if (a.ids.defined() && b.ids.defined())
    return (a.ids.unsqueeze(2) == b.ids.unsqueeze(1)).to(a.V.scalar_type());
  if (a.ids.defined()) {  // onehot(ids_t) . U'_s = U'[s, ids_t]
    int64_t B = a.ids.size(0), Ti = a.ids.size(1), Tj = b.U.size(1);
    return b.U.gather(2, a.ids.unsqueeze(1).expand({B, Tj, Ti})).transpose(1, 2);
  }
  if (b.ids.defined()) return u_gram(b, a).transpose(1, 2);
  return torch::bmm(a.U, b.U.transpose(1, 2));
}

// Per-sample <G^a_b, G^b_b>_F by ghost products: (B).
Tensor ghost_inner(const PerSampleGrads::Contribution& a, const PerSampleGrads::Contribution& b) {
  Tensor gv = torch::bmm(a.V, b.V.transpose(1, 2));  // (B, Ti, Tj)
  return (u_gram(a, b) * gv).sum({1, 2});
}

double ghost_cost(const PerSampleGrads::ParamState& s) {
  double c = 0;
  for (size_t i = 0; i < s.outer.size(); ++i)
    for (size_t j = i; j < s.outer.size(); ++j) {
      const auto &a = s.outer[i], &b = s.outer[j];
      double Ti = static_cast<double>(a.V.size(1)), Tj = static_cast<double>(b.V.size(1));
      double mu = (a.ids.defined() || b.ids.defined()) ? 1.0 : static_cast<double>(a.m);
      c += Ti * Tj * (mu + static_cast<double>(a.n));
    }
  return c;
}

double materialize_cost(const PerSampleGrads::ParamState& s) {
  // Every sample's (m, n) block is zero-filled and reduced for its norm: m n, however sparse its
  // contributions (an embedding lookup touches T rows but its block spans the vocabulary).
  double c = s.outer.empty() ? 0.0 : static_cast<double>(s.outer[0].m) * s.outer[0].n;
  for (const auto& k : s.outer) {
    double T = static_cast<double>(k.V.size(1));
    c += k.ids.defined() ? T * k.n : T * k.m * k.n;
  }
  return c;
}

}  // namespace

PerSampleGrads::PerSampleGrads(model::CausalLM model, GradOptions opts)
    : model_(std::move(model)), opts_(opts) {
  for (auto& [name, t] : model::trainable_parameters(model_)) {
    params_.push_back({name, t});
    dim_ += t.numel();
  }
  DPFT_CHECK(!params_.empty(), "the model has no trainable parameters (check model.peft)");
  for (auto& item : model_->named_modules()) {
    const std::shared_ptr<torch::nn::Module>& m = item.value();
    auto h = std::make_unique<Hooked>();
    h->module = m;
    if (auto* l = dynamic_cast<model::LinearImpl*>(m.get())) {
      if (!(trainable(l->weight) || trainable(l->bias) || trainable(l->lora_A) ||
            trainable(l->lora_B)))
        continue;
      h->kind = Hooked::kLinear;
      l->capture = &h->cap;
    } else if (auto* n = dynamic_cast<model::NormImpl*>(m.get())) {
      if (!(trainable(n->weight) || trainable(n->bias))) continue;
      h->kind = Hooked::kNorm;
      n->capture = &h->cap;
    } else if (auto* e = dynamic_cast<model::EmbeddingImpl*>(m.get())) {
      if (!trainable(e->weight)) continue;
      h->kind = Hooked::kEmbedding;
      e->capture = &h->cap;
      e->head_capture = &h->head;
    } else if (auto* ob = dynamic_cast<model::OutputBiasHost*>(m.get())) {
      if (!trainable(ob->output_bias())) continue;
      h->kind = Hooked::kOutputBias;
      ob->bias_capture = &h->cap;
    } else {
      continue;
    }
    hooked_.push_back(std::move(h));
  }
  // Every trainable parameter must belong to a module we capture.
  std::map<const void*, int> owned;
  for (auto& h : hooked_)
    for (auto& p : h->module->parameters(false)) owned[p.unsafeGetTensorImpl()] = 1;
  for (auto& p : params_)
    DPFT_CHECK(owned.count(p.param.unsafeGetTensorImpl()),
               "per-sample gradients: trainable parameter '{}' is not in a Linear, Norm, "
               "Embedding or output-bias layer",
               p.name);
}

PerSampleGrads::~PerSampleGrads() {
  for (auto& h : hooked_) {
    if (auto* l = dynamic_cast<model::LinearImpl*>(h->module.get())) l->capture = nullptr;
    if (auto* n = dynamic_cast<model::NormImpl*>(h->module.get())) n->capture = nullptr;
    if (auto* e = dynamic_cast<model::EmbeddingImpl*>(h->module.get()))
      e->capture = e->head_capture = nullptr;
    if (auto* ob = dynamic_cast<model::OutputBiasHost*>(h->module.get()))
      ob->bias_capture = nullptr;
  }
}

void PerSampleGrads::release() {
  for (auto& h : hooked_) h->cap.clear(), h->head.clear();
  state_.clear();
  batch_ = 0;
}

Tensor PerSampleGrads::compute(const Tensor& input_ids, const Tensor& attention_mask,
                               const Tensor& labels) {
  lm::LmBatch b;
  b.input_ids = input_ids;
  b.attention_mask = attention_mask;
  b.labels = labels;
  return compute(b);
}

Tensor PerSampleGrads::compute(const lm::LmBatch& batch) {
  release();
  const Tensor& input_ids = batch.input_ids;
  DPFT_CHECK(input_ids.dim() == 2 && (batch.objective == lm::Objective::kClassification ||
                                      batch.labels.sizes() == input_ids.sizes()),
             "per-sample gradients: input_ids and labels must both be (B, T), got {} and {}",
             shape_str(input_ids.sizes()),
             batch.labels.defined() ? shape_str(batch.labels.sizes()) : "none");
  batch_ = input_ids.size(0);
  const torch::Device dev = params_[0].param.device();  // batches are collated on the host
  if (batch_ == 0) {
    state_.clear();
    for (size_t i = 0; i < params_.size(); ++i) state_.push_back(std::make_unique<ParamState>());
    return torch::zeros({0}, torch::TensorOptions().device(dev));
  }
  Tensor losses = lm::sample_losses(*model_, batch);  // (B)
  std::vector<Tensor> outputs;
  std::vector<model::Capture*> caps;
  for (auto& h : hooked_)
    for (model::Capture* c : {&h->cap, &h->head}) {
      DPFT_CHECK(c->calls <= 1,
                 "per-sample gradients: a captured layer ran {} times in one forward", c->calls);
      if (c->calls == 1 && c->output.requires_grad())
        outputs.push_back(c->output), caps.push_back(c);
    }
  DPFT_CHECK(!outputs.empty(),
             "per-sample gradients: no trainable layer took part in the forward pass");
  std::vector<Tensor> grads =
      torch::autograd::grad({losses.sum()}, outputs, {}, false, false, true);
  for (size_t i = 0; i < caps.size(); ++i) {
    caps[i]->output =
        grads[i].defined() ? grads[i].detach() : torch::zeros_like(outputs[i]);  // now dL/dy
  }
  collect();
  return losses.detach();
}

void PerSampleGrads::collect() {
  std::map<const void*, size_t> index;
  state_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    index[params_[i].param.unsafeGetTensorImpl()] = i;
    state_.push_back(std::make_unique<ParamState>());
  }
  const int64_t B = batch_;
  auto state_of = [&](const Tensor& p) -> ParamState* {
    if (!trainable(p)) return nullptr;
    return state_[index.at(p.unsafeGetTensorImpl())].get();
  };
  auto add_direct = [&](const Tensor& p, const Tensor& d) {  // d: (B, numel)
    if (ParamState* s = state_of(p)) s->direct = s->direct.defined() ? s->direct + d : d;
  };
  auto add_outer = [&](const Tensor& p, Tensor U, Tensor ids, Tensor V) {
    ParamState* s = state_of(p);
    if (!s) return;
    Contribution c;
    c.V = as_float(btk(V, B));
    c.n = c.V.size(2);
    if (ids.defined()) {
      c.ids = ids.reshape({B, -1});
      c.m = p.size(0);
    } else {
      c.U = as_float(btk(U, B));
      c.m = c.U.size(2);
    }
    DPFT_CHECK(c.m * c.n == p.numel(),
               "per-sample gradients: factor shapes {}x{} do not match a parameter of {}", c.m, c.n,
               shape_str(p.sizes()));
    s->outer.push_back(std::move(c));
  };
  for (auto& h : hooked_) {
    const Tensor& g = h->cap.output;  // dL/dy after compute()
    if (h->kind == Hooked::kLinear && h->cap.calls == 1) {
      auto* l = static_cast<model::LinearImpl*>(h->module.get());
      Tensor x = h->cap.input, gy = btk(g, B);
      add_outer(l->weight, gy, {}, x);
      if (trainable(l->bias)) add_direct(l->bias, as_float(gy.sum(1)));
      if (l->has_lora() && !l->merged()) {
        Tensor xd = h->cap.aux.defined() ? h->cap.aux : x;
        double s = l->lora_scale();
        if (trainable(l->lora_A))
          add_outer(l->lora_A, s * torch::matmul(gy, l->lora_B.detach()), {}, xd);
        if (trainable(l->lora_B))
          add_outer(l->lora_B, s * gy, {}, torch::matmul(xd, l->lora_A.detach().t()));
      }
    } else if (h->kind == Hooked::kNorm && h->cap.calls == 1) {
      auto* n = static_cast<model::NormImpl*>(h->module.get());
      Tensor gy = as_float(btk(g, B));
      if (trainable(n->weight)) add_direct(n->weight, (gy * as_float(btk(h->cap.aux, B))).sum(1));
      if (trainable(n->bias)) add_direct(n->bias, gy.sum(1));
    } else if (h->kind == Hooked::kEmbedding) {
      auto* e = static_cast<model::EmbeddingImpl*>(h->module.get());
      if (h->cap.calls == 1) add_outer(e->weight, {}, h->cap.input, g);
      if (h->head.calls == 1) add_outer(e->weight, h->head.output, {}, h->head.input);
    } else if (h->kind == Hooked::kOutputBias && h->cap.calls == 1) {  // d bias = sum_t dL/dy
      add_direct(dynamic_cast<model::OutputBiasHost*>(h->module.get())->output_bias(),
                 as_float(btk(g, B).sum(1)));
    }
  }
  for (auto& h : hooked_) h->cap.output = h->cap.input = h->cap.aux = Tensor(), h->head.clear();
}

void PerSampleGrads::materialize(ParamState& s) {
  if (s.G.defined()) return;
  const int64_t B = batch_;
  Tensor G;
  if (!s.outer.empty()) {
    const int64_t m = s.outer[0].m, n = s.outer[0].n;
    G = torch::zeros({B, m, n}, s.outer[0].V.options());
    for (const auto& c : s.outer) {
      if (c.ids.defined()) {
        Tensor offs = torch::arange(B, c.ids.options()).unsqueeze(1) * m;  // (B, 1)
        G.view({B * m, n}).index_add_(0, (c.ids + offs).reshape(-1), c.V.reshape({-1, n}));
      } else {
        G.baddbmm_(c.U.transpose(1, 2), c.V);
      }
    }
    G = G.view({B, m * n});
  }
  if (s.direct.defined()) G = G.defined() ? G + s.direct : s.direct;
  s.G = G;
}

Tensor PerSampleGrads::param_sq_norms(ParamState& s) {
  const int64_t B = batch_;
  bool ghost = false;
  if (!s.outer.empty() && !s.direct.defined() && opts_.mode != GradMode::kMaterialize) {
    double mb = static_cast<double>(B) * s.outer[0].m * s.outer[0].n * 4.0 / (1 << 20);
    ghost = opts_.mode == GradMode::kGhost || ghost_cost(s) < materialize_cost(s) ||
            mb > opts_.max_materialize_mb;
  }
  if (ghost && !s.G.defined()) {
    Tensor sq = torch::zeros({B}, s.outer[0].V.options());
    for (size_t i = 0; i < s.outer.size(); ++i)
      for (size_t j = i; j < s.outer.size(); ++j)
        sq += (i == j ? 1.0 : 2.0) * ghost_inner(s.outer[i], s.outer[j]);
    s.mode = "ghost";
    return sq.to(torch::kFloat64);
  }
  materialize(s);
  s.mode = s.outer.empty() ? "direct" : "materialize";
  return s.G.to(torch::kFloat64).pow(2).sum(1);
}

Tensor PerSampleGrads::sq_norms() {
  Tensor total = torch::zeros({batch_}, params_[0].param.options().dtype(torch::kFloat64));
  for (auto& sp : state_) {
    ParamState& s = *sp;
    if (s.outer.empty() && !s.direct.defined()) continue;
    total += param_sq_norms(s);
  }
  return total.to(torch::kFloat32);
}

Tensor PerSampleGrads::sq_norms_by_param() {
  std::vector<Tensor> cols;
  for (auto& sp : state_) {
    ParamState& s = *sp;
    cols.push_back(s.outer.empty() && !s.direct.defined()
                       ? torch::zeros({batch_}, params_[0].param.options().dtype(torch::kFloat64))
                       : param_sq_norms(s));
  }
  return torch::stack(cols, 1).to(torch::kFloat32);  // (B, P)
}

Tensor PerSampleGrads::matrix() {
  std::vector<Tensor> cols;
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = *state_[i];
    if (s.outer.empty() && !s.direct.defined()) {
      cols.push_back(torch::zeros({batch_, params_[i].param.numel()},
                                  params_[i].param.options().dtype(torch::kFloat32)));
      continue;
    }
    materialize(s);
    cols.push_back(s.G.to(torch::kFloat32));
  }
  return torch::cat(cols, 1);
}

std::vector<Tensor> PerSampleGrads::weighted_sum(const Tensor& w) {
  const auto P = static_cast<int64_t>(params_.size());
  DPFT_CHECK((w.dim() == 1 && w.size(0) == batch_) ||
                 (w.dim() == 2 && w.size(0) == batch_ && w.size(1) == P),
             "weighted_sum: weights must be ({}) or ({}, {}), got {}", batch_, batch_, P,
             shape_str(w.sizes()));
  std::vector<Tensor> out;
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].param;
    ParamState& s = *state_[k];
    const Tensor wk = w.dim() == 1 ? w : w.select(1, static_cast<int64_t>(k));  // (B)
    Tensor acc = torch::zeros({p.numel()}, p.options().dtype(torch::kFloat32));
    if (batch_ > 0 && s.G.defined()) {
      acc = torch::mv(s.G.t(), wk.to(s.G.scalar_type())).to(torch::kFloat32);
    } else if (batch_ > 0) {
      for (const auto& c : s.outer) {
        Tensor wv =
            (c.V * wk.to(c.V.scalar_type()).view({-1, 1, 1})).reshape({-1, c.n});  // (B T, n)
        Tensor part =
            c.ids.defined()
                ? torch::zeros({c.m, c.n}, c.V.options()).index_add_(0, c.ids.reshape(-1), wv)
                : torch::mm(c.U.reshape({-1, c.m}).t(), wv);
        acc += part.reshape(-1).to(torch::kFloat32);
      }
      if (s.direct.defined())
        acc += torch::mv(s.direct.t(), wk.to(s.direct.scalar_type())).to(torch::kFloat32);
    }
    out.push_back(acc.view(p.sizes()));  // float32 whatever the parameter's dtype
  }
  return out;
}

namespace {

// G (b, N) float32 times P (N, k) of any floating dtype, in float32; a non-float32 P is
// converted a slice of rows at a time so no float32 copy of all of it is made.
Tensor mm_f32(const Tensor& G, const Tensor& P) {
  if (P.scalar_type() == torch::kFloat32) return torch::mm(G, P);
  const int64_t N = P.size(0), rows = std::max<int64_t>(1, (int64_t{1} << 22) / P.size(1));
  Tensor out = torch::zeros({G.size(0), P.size(1)}, G.options());
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t r1 = std::min(N, r0 + rows);
    out.addmm_(G.slice(1, r0, r1), P.slice(0, r0, r1).to(torch::kFloat32));
  }
  return out;
}

}  // namespace

Tensor PerSampleGrads::project(const std::vector<Tensor>& blocks, double chunk_mb) {
  DPFT_CHECK(blocks.size() == params_.size(), "project: {} blocks of P for {} trainable parameters",
             blocks.size(), params_.size());
  int64_t k = -1;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Tensor& P = blocks[i];
    DPFT_CHECK(P.defined() && P.dim() == 2 && P.size(0) == params_[i].param.numel() &&
                   (k < 0 || P.size(1) == k) && P.is_floating_point(),
               "project: the block of P for '{}' must be ({}, k) floating point with one k for "
               "all, got {}",
               params_[i].name, params_[i].param.numel(),
               P.defined() ? shape_str(P.sizes()) : "none");
    k = P.size(1);
  }
  const int64_t B = batch_;
  const torch::TensorOptions f32 = params_[0].param.options().dtype(torch::kFloat32);
  Tensor out = torch::zeros({B, std::max<int64_t>(k, 0)}, f32);
  if (B == 0) return out;
  const double budget = std::max(1.0, chunk_mb) * (1 << 20) / 4.0;  // float32 elements
  auto rows_per_chunk = [&](double per_sample) {
    return std::max<int64_t>(1, static_cast<int64_t>(budget / std::max(1.0, per_sample)));
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = *state_[i];
    const Tensor& P = blocks[i];
    if (s.G.defined()) {  // already materialised (sq_norms chose it): one product
      out += mm_f32(as_float(s.G), P);
      continue;
    }
    if (s.direct.defined()) out += mm_f32(as_float(s.direct), P);
    std::vector<const Contribution*> dense;
    for (const auto& c : s.outer) {
      if (!c.ids.defined()) {
        dense.push_back(&c);
        continue;
      }
      // Embedding lookup: g_b = sum_t e_{id_t} v_t^T, so P_j^T g_b = sum_t P_j[id_t]^T v_t with
      // P_j viewed (m, n, k).
      const int64_t T = c.V.size(1), n = c.n;
      const Tensor P3 = P.reshape({c.m, n * k});  // a view when P's rows are contiguous
      const int64_t step = rows_per_chunk(static_cast<double>(T) * n * k);
      for (int64_t b0 = 0; b0 < B; b0 += step) {
        const int64_t b1 = std::min(B, b0 + step), nb = b1 - b0;
        Tensor rows = P3.index_select(0, c.ids.slice(0, b0, b1).reshape(-1))
                          .to(torch::kFloat32)
                          .view({nb * T, n, k});
        Tensor v = c.V.slice(0, b0, b1).reshape({nb * T, 1, n}).to(torch::kFloat32);
        out.slice(0, b0, b1) += torch::bmm(v, rows).view({nb, T, k}).sum(1);
      }
    }
    if (dense.empty()) continue;
    // Dense outer products: G_b = sum_t u_t v_t^T materialised for a chunk of samples.
    const int64_t m = dense[0]->m, n = dense[0]->n;
    const int64_t step = rows_per_chunk(static_cast<double>(m) * n);
    for (int64_t b0 = 0; b0 < B; b0 += step) {
      const int64_t b1 = std::min(B, b0 + step);
      Tensor G = torch::zeros({b1 - b0, m, n}, dense[0]->V.options());
      for (const Contribution* c : dense)
        G.baddbmm_(c->U.slice(0, b0, b1).transpose(1, 2), c->V.slice(0, b0, b1));
      out.slice(0, b0, b1) += mm_f32(G.view({b1 - b0, m * n}).to(torch::kFloat32), P);
    }
  }
  return out;
}

std::vector<std::string> PerSampleGrads::last_modes() const {
  std::vector<std::string> out;
  for (const auto& s : state_) out.push_back(s->mode);
  return out;
}

std::pair<Tensor, Tensor> reference_per_sample_grads(model::CausalLM& model,
                                                     const Tensor& input_ids,
                                                     const Tensor& attention_mask,
                                                     const Tensor& labels) {
  lm::LmBatch b;
  b.input_ids = input_ids;
  b.attention_mask = attention_mask;
  b.labels = labels;
  return reference_per_sample_grads(model, b);
}

std::pair<Tensor, Tensor> reference_per_sample_grads(model::CausalLM& model,
                                                     const lm::LmBatch& batch) {
  auto params = model::trainable_parameters(model);
  int64_t B = batch.input_ids.size(0), p = 0;
  for (auto& kv : params) p += kv.second.numel();
  const torch::TensorOptions f32 =
      params.front().second.options().dtype(torch::kFloat32);  // the model's device
  Tensor out = torch::zeros({B, p}, f32), losses = torch::zeros({B}, f32);
  for (int64_t b = 0; b < B; ++b) {
    // Sample b alone, on its unpadded tokens.
    lm::LmBatch one = lm::select_rows(batch, {b});
    Tensor keep = batch.attention_mask.defined() ? batch.attention_mask[b].nonzero().squeeze(1)
                                                 : torch::arange(batch.input_ids.size(1));
    auto cut = [&](const Tensor& t) { return t.defined() ? t.index_select(1, keep) : t; };
    one.input_ids = cut(one.input_ids);
    one.labels = cut(one.labels);
    one.token_type_ids = cut(one.token_type_ids);
    one.attention_mask = torch::ones_like(one.input_ids);
    for (auto& kv : params) kv.second.mutable_grad() = Tensor();
    Tensor loss = lm::sample_losses(*model, one)[0];
    losses[b] = loss.detach();
    if (!loss.requires_grad()) continue;
    loss.backward();
    int64_t off = 0;
    for (auto& kv : params) {
      int64_t n = kv.second.numel();
      if (kv.second.grad().defined())
        out[b].slice(0, off, off + n).copy_(kv.second.grad().reshape(-1));
      off += n;
    }
  }
  for (auto& kv : params) kv.second.mutable_grad() = Tensor();
  return {out, losses};
}

}  // namespace dpft::grad
