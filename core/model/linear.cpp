#include "core/model/linear.hpp"

#include <cmath>

#include "core/util/error.hpp"

namespace dpft::model {

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  weight = register_parameter("weight", torch::empty({out, in}));
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  torch::nn::init::uniform_(weight, -bound, bound);
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias.defined() ? bias : torch::Tensor());
  if (has_lora() && !merged_) {
    torch::Tensor xd = (lora_dropout_ > 0 && is_training()) ? torch::dropout(x, lora_dropout_, true) : x;
    y = y + lora_scale_ * torch::matmul(torch::matmul(xd, lora_A.t()), lora_B.t());
    if (capture && xd.data_ptr() != x.data_ptr()) capture->aux = xd.detach();
  }
  if (capture) {
    capture->input = x.detach();
    capture->output = y;
    ++capture->calls;
  }
  return y;
}

void LinearImpl::add_lora(int64_t r, double alpha, double dropout, torch::Generator* gen) {
  DPFT_CHECK(!has_lora(), "LoRA already added to this layer");
  DPFT_CHECK(r >= 1, "LoRA rank must be >= 1, got {}", r);
  // kaiming_uniform_(a=sqrt(5)) on (r, in): bound = sqrt(6 / ((1 + a^2) fan_in)) = 1/sqrt(in).
  // Drawn in float32 on the CPU (the same numbers whatever the model's dtype and device), then
  // given the base weight's dtype and device.
  double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  torch::Tensor a = torch::empty({r, in_features});
  {
    torch::NoGradGuard ng;
    if (gen)
      a.uniform_(-bound, bound, *gen);
    else
      a.uniform_(-bound, bound);
  }
  lora_A = register_parameter("lora_A", a.to(weight.options()));
  lora_B = register_parameter("lora_B", torch::zeros({out_features, r}, weight.options()));
  lora_scale_ = alpha / static_cast<double>(r);
  lora_dropout_ = dropout;
}

void LinearImpl::merge_lora() {
  DPFT_CHECK(has_lora() && !merged_, "merge_lora: no unmerged LoRA on this layer");
  torch::NoGradGuard ng;
  weight.add_(torch::matmul(lora_B, lora_A), lora_scale_);
  merged_ = true;
}

void LinearImpl::unmerge_lora() {
  DPFT_CHECK(has_lora() && merged_, "unmerge_lora: LoRA is not merged");
  torch::NoGradGuard ng;
  weight.sub_(torch::matmul(lora_B, lora_A), lora_scale_);
  merged_ = false;
}

}  // namespace dpft::model
