#include "core/train/optimizer.hpp"

#include <cmath>
#include <map>
#include <optional>

#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::train {

namespace {

torch::Tensor cpu_copy(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU).clone().contiguous();
}

torch::Tensor int_scalar(int64_t v) {
  return torch::tensor(v, torch::kInt64);
}

}  // namespace

void validate(const OptimizerOptions& o) {
  DPFT_CHECK_AS(ConfigError, std::isfinite(o.weight_decay) && o.weight_decay >= 0,
                "train.weight_decay = {} must be finite and >= 0", o.weight_decay);
  DPFT_CHECK_AS(ConfigError, o.momentum >= 0 && o.momentum < 1,
                "train.momentum = {} must be in [0, 1)", o.momentum);
  DPFT_CHECK_AS(ConfigError, o.beta1 >= 0 && o.beta1 < 1, "AdamW beta1 = {} must be in [0, 1)",
                o.beta1);
  DPFT_CHECK_AS(ConfigError, o.beta2 >= 0 && o.beta2 < 1, "AdamW beta2 = {} must be in [0, 1)",
                o.beta2);
  DPFT_CHECK_AS(ConfigError, std::isfinite(o.eps) && o.eps > 0,
                "AdamW eps = {} must be finite and > 0", o.eps);
}

Optimizer::Optimizer(std::vector<torch::Tensor> params, OptimizerOptions o)
    : params_(std::move(params)), state_(params_.size()), opts_(std::move(o)) {
  validate(opts_);
  adamw_ = opts_.kind == OptimizerKind::kAdamW;
  for (size_t i = 0; i < params_.size(); ++i) {
    DPFT_CHECK(params_[i].defined(), "optimizer parameter {} is undefined", i);
    DPFT_CHECK(params_[i].is_floating_point(), "optimizer parameter {} has non-floating dtype {}",
               i, std::string(c10::toString(params_[i].scalar_type())));
    const bool half =
        params_[i].scalar_type() == torch::kBFloat16 || params_[i].scalar_type() == torch::kFloat16;
    master_.push_back(half ? params_[i].detach().to(torch::kFloat32, false, true) : params_[i]);
  }
}

void Optimizer::reset_state() {
  state_.assign(params_.size(), ParamState{});
  steps_ = 0;
}

void Optimizer::masters_to_params() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!master_[i].is_same(params_[i])) params_[i].copy_(master_[i]);
}

void Optimizer::params_to_masters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!master_[i].is_same(params_[i])) master_[i].copy_(params_[i]);
}

void Optimizer::step(const std::vector<torch::Tensor>& grads, double lr) {
  DPFT_CHECK(grads.size() == params_.size(), "optimizer step got {} gradients for {} parameters",
             grads.size(), params_.size());
  DPFT_CHECK(std::isfinite(lr) && lr >= 0, "learning rate {} must be finite and >= 0", lr);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& g0 = grads[i];
    if (!g0.defined()) continue;
    torch::Tensor& p = master_[i];
    DPFT_CHECK(g0.sizes() == p.sizes(), "gradient {} has shape {}, its parameter {}", i,
               shape_str(g0.sizes()), shape_str(p.sizes()));
    torch::Tensor g = g0.to(p.device(), p.scalar_type());
    ParamState& st = state_[i];
    if (!adamw_) {
      // torch.optim.SGD, dampening 0, nesterov off.
      if (opts_.weight_decay != 0) g = g.add(p, opts_.weight_decay);
      if (opts_.momentum != 0) {
        if (!st.buf.defined())
          st.buf = g.clone();
        else
          st.buf.mul_(opts_.momentum).add_(g);
        g = st.buf;
      }
      p.add_(g, -lr);
    } else {
      // torch.optim.AdamW (amsgrad off).
      if (opts_.weight_decay != 0) p.mul_(1 - lr * opts_.weight_decay);
      if (!st.buf.defined()) {
        st.buf = torch::zeros_like(p, torch::MemoryFormat::Preserve);
        st.buf_sq = torch::zeros_like(p, torch::MemoryFormat::Preserve);
      }
      st.step += 1;
      double bc1 = 1 - std::pow(opts_.beta1, static_cast<double>(st.step));
      double bc2 = 1 - std::pow(opts_.beta2, static_cast<double>(st.step));
      st.buf.mul_(opts_.beta1).add_(g, 1 - opts_.beta1);
      st.buf_sq.mul_(opts_.beta2).addcmul_(g, g, 1 - opts_.beta2);
      torch::Tensor denom = (st.buf_sq.sqrt() / std::sqrt(bc2)).add_(opts_.eps);
      p.addcdiv_(st.buf, denom, -lr / bc1);
    }
    if (!p.is_same(params_[i])) params_[i].copy_(p);  // round the master into the model
  }
  ++steps_;
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("step", int_scalar(steps_));
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& st = state_[i];
    if (!st.buf.defined()) continue;
    std::string k = std::to_string(i);
    if (!adamw_) {
      out.emplace_back("momentum." + k, cpu_copy(st.buf));
    } else {
      out.emplace_back("step." + k, int_scalar(st.step));
      out.emplace_back("exp_avg." + k, cpu_copy(st.buf));
      out.emplace_back("exp_avg_sq." + k, cpu_copy(st.buf_sq));
    }
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& s) {
  const std::string kind = name_of(opts_.kind);
  std::vector<std::string> prefixes =
      adamw_ ? std::vector<std::string>{"step", "exp_avg", "exp_avg_sq"}
             : std::vector<std::string>{"momentum"};
  const std::string expected = adamw_ ? "step.<i>, exp_avg.<i>, exp_avg_sq.<i>" : "momentum.<i>";
  std::optional<int64_t> steps;
  // index -> prefix -> tensor
  std::map<size_t, std::map<std::string, torch::Tensor>> found;
  for (const auto& [name, t] : s) {
    DPFT_CHECK_AS(InputError, t.defined(), "{} optimizer state entry '{}' is undefined", kind,
                  name);
    if (name == "step") {
      DPFT_CHECK_AS(InputError, t.numel() == 1 && !t.is_floating_point(),
                    "{} optimizer state 'step' must be one integer, got shape {}", kind,
                    shape_str(t.sizes()));
      steps = t.item<int64_t>();
      continue;
    }
    size_t dot = name.rfind('.');
    std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
    std::string idx = dot == std::string::npos ? "" : name.substr(dot + 1);
    bool known = false;
    for (const auto& p : prefixes) known = known || p == prefix;
    bool digits =
        !idx.empty() && idx.size() < 10 && idx.find_first_not_of("0123456789") == std::string::npos;
    DPFT_CHECK_AS(InputError, known && digits,
                  "{} optimizer state has an unknown entry '{}' (expected 'step' and {}): was "
                  "the checkpoint written with another train.optimizer?",
                  kind, name, expected);
    size_t i = std::stoul(idx);
    DPFT_CHECK_AS(InputError, i < params_.size(),
                  "{} optimizer state entry '{}' refers to parameter {}, but there are only {}: "
                  "the checkpoint belongs to a different model or PEFT setup",
                  kind, name, i, params_.size());
    if (prefix == "step") {
      DPFT_CHECK_AS(InputError, t.numel() == 1 && !t.is_floating_point(),
                    "{} optimizer state '{}' must be one integer", kind, name);
    } else {
      DPFT_CHECK_AS(InputError, t.sizes() == params_[i].sizes(),
                    "{} optimizer state '{}' has shape {}, but parameter {} has shape {}: the "
                    "checkpoint belongs to a different model or PEFT setup",
                    kind, name, shape_str(t.sizes()), i, shape_str(params_[i].sizes()));
    }
    DPFT_CHECK_AS(InputError, !found[i].count(prefix), "{} optimizer state repeats '{}'", kind,
                  name);
    found[i][prefix] = t;
  }
  DPFT_CHECK_AS(InputError, steps.has_value(), "{} optimizer state lacks its 'step' entry", kind);
  std::vector<ParamState> next(params_.size());
  for (auto& [i, m] : found) {
    DPFT_CHECK_AS(InputError, m.size() == prefixes.size(),
                  "{} optimizer state for parameter {} is incomplete: needs {} together (i = {})",
                  kind, i, expected, i);
    const torch::Tensor& p = master_[i];
    if (adamw_) {
      next[i].step = m["step"].item<int64_t>();
      DPFT_CHECK_AS(InputError, next[i].step >= 1, "{} optimizer state 'step.{}' = {} must be >= 1",
                    kind, i, next[i].step);
      next[i].buf = m["exp_avg"].to(p.device(), p.scalar_type()).clone();
      next[i].buf_sq = m["exp_avg_sq"].to(p.device(), p.scalar_type()).clone();
    } else {
      next[i].buf = m["momentum"].to(p.device(), p.scalar_type()).clone();
    }
  }
  state_ = std::move(next);
  steps_ = *steps;
}

}  // namespace dpft::train
