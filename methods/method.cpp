// Shared method behaviour: the per-step release plan of StepReleaseMethod.
#include "methods/method.hpp"

#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/util/error.hpp"

namespace dpft {

YAML::Node Method::options_yaml() {
  Fields w = Fields::writer("method");
  configure(w);
  return w.written();
}

std::vector<privacy::Release> StepReleaseMethod::plan(const Spec& spec, int64_t dataset_size,
                                                      const Inheritance& inherited) {
  // Adaptive clipping's count releases are composed in when the steps' sigma is calibrated.
  train::DpSettings dp = train::resolve_dp(spec, dataset_size, inherited.releases,
                                           train::count_blocks(spec, dataset_size));
  set_noise_std(dp, spec);
  dp_ = dp;
  std::vector<privacy::Release> out = {dp.release(spec.train.steps)};
  if (dp.adaptive) out.push_back(dp.count_release(spec.train.steps));
  return out;
}

const train::DpSettings& StepReleaseMethod::dp() const {
  DPFT_CHECK(dp_.has_value(), "{}: the DP settings are read before plan() resolved them", name());
  return *dp_;
}

void check_task(const Method& m, const Spec& spec) {
  DPFT_CHECK_AS(ConfigError, spec.data.task == Task::kSeq2seq || !m.needs_seq2seq(),
                "method {} fine-tunes an encoder-decoder (bart) on (condition -> document): set "
                "data.task: seq2seq (data.task is {})",
                m.name(), name_of(spec.data.task));
  DPFT_CHECK_AS(ConfigError,
                spec.data.task == Task::kLm || m.trains_encoders() || m.needs_seq2seq(),
                "method {} trains decoder language models only (it generates or scores text); "
                "data.task: {} runs with sgd or dp-sgd",
                m.name(), name_of(spec.data.task));
  DPFT_CHECK_AS(ConfigError, spec.data.public_data.path.empty() || m.reads_public_data(),
                "data.public ({}) is read by method dp-sft with method.source: public only; "
                "method {} would ignore it: remove it",
                spec.data.public_data.path, m.name());
  DPFT_CHECK_AS(ConfigError, m.honours_unit(spec.privacy.unit),
                "privacy.unit: {}: method {} bounds one training row (privacy.unit: example) "
                "and cannot yet bound a {}'s rows together; use privacy.unit: example, or read "
                "docs/privacy.md (\"Choosing the privacy unit\") for what each method honours",
                privacy::name_of(spec.privacy.unit), m.name(), privacy::name_of(spec.privacy.unit));
  DPFT_CHECK_AS(ConfigError,
                spec.privacy.clipping_style == privacy::ClippingStyle::kFlat || m.steps_by_dp_sgd(),
                "privacy.clipping_style: {}: method {} clips whole gradients (or their "
                "projections, or votes) only; use clipping_style: flat, or dp-sgd, denoise, "
                "sft+dp-sgd or ctcl",
                privacy::name_of(spec.privacy.clipping_style), m.name());
  DPFT_CHECK_AS(ConfigError, !spec.privacy.adaptive_clip_quantile || m.steps_by_dp_sgd(),
                "privacy.adaptive_clip_quantile: method {} does not adapt its clipping "
                "threshold; remove adaptive_clip_quantile, or use dp-sgd, denoise, sft+dp-sgd "
                "or ctcl",
                m.name());
  DPFT_CHECK_AS(ConfigError, spec.data.task != Task::kMlm || m.name() == "sgd",
                "data.task: mlm is pretraining on public text: method sgd (DP masked-LM "
                "training is not offered: no experiment here needs it, and its per-sample "
                "gradients are not held to the reference); method {} was given",
                m.name());
}

void check_model(const Method& m, const train::TrainInputs& in) {
  DPFT_CHECK_AS(ConfigError, !in.enc_tok || m.trains_encoders(),
                "method {} trains decoder language models only (it generates or scores text with "
                "the decoder tokenizer); model.path {} is a {} encoder: use sgd or dp-sgd",
                m.name(), in.model_dir.string(), in.model->config().model_type);
}

}  // namespace dpft
