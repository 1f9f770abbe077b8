// The interface every fine-tuning method implements (methods/<paper>/<method>.cpp, listed in
// methods/registry.cpp).
//
// A method owns its spec block: `method: {name: X, ...}`. configure() is its one field list:
// through a reading Fields it parses the block (without `name`), so unknown keys are rejected
// with suggestions, and validates it; through a Fields writer it dumps the resolved options
// (options_yaml(), for `dpft config dump` and config.resolved.yaml). Each option's meaning is
// the comment at its get() call. A method is configured once per spec parse (the Spec keeps
// it); each run works on a clone() of it (methods/registry.hpp).
// A run then goes (methods/run.cpp):
//   inputs          the artefacts the run builds on (model.path, data files, a method's own
//                   such as dp-sft's method.file) are judged by their provenance
//                   (core/run/provenance.hpp): the releases they embody of this run's
//                   private data are inherited;
//   plan(spec, N, inherited)  once, with the tokenised private set's size N: resolves the DP
//                   settings (sigma calibrated once, the inherited releases composed in) and
//                   returns every DP release the run itself will make, so the ledger can refuse
//                   a run over budget before anything is written;
//   run(ctx, in)    trains and returns the method's blocks for metrics.json.
// A method never computes epsilon itself: every DP release goes to the run's PrivacyLedger
// (core/privacy/ledger.hpp), the only place epsilon is computed.
#pragma once
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"
#include "core/run/provenance.hpp"
#include "core/run/run_context.hpp"
#include "core/train/dp_settings.hpp"
#include "core/train/setup.hpp"

namespace dpft {

class Fields;

class Method : public ConfiguredMethod {
 public:
  virtual std::string name() const = 0;
  // A copy of this configured method, for one run (plan() and run() keep their settings in it):
  // MethodOf below writes it.
  virtual std::unique_ptr<Method> clone() const = 0;
  // The label reports print for runs of this configuration (e.g. "PE-SGD-FixSample"); the
  // spec's top-level `label` overrides it.
  virtual std::string label() const { return name(); }
  // The method's option list: read and validate them, or (options.writing()) write them.
  // Nothing but Fields getters may change an option, so that a writer pass changes nothing.
  virtual void configure(Fields& options) = 0;
  // The resolved options, every key with its value (defaults included): configure() through a
  // Fields writer.
  YAML::Node options_yaml();
  // Whether run() trains on the private data: the run loads the model and the data sets once
  // (data/train_inputs.hpp) and hands them to plan() (their size) and run().
  virtual bool trains() const { return true; }
  // Whether the method also trains encoders (data.task classification or mlm, or a causal BERT
  // under data.task lm) through the same engine. Methods that generate or score text with the
  // decoder tokenizer (PE-SGD and its family) train decoder language models only.
  virtual bool trains_encoders() const { return false; }
  // Whether the method trains an encoder-decoder on data.task seq2seq, and only that (ctcl).
  virtual bool needs_seq2seq() const { return false; }
  // Whether it makes each seq2seq example's source itself (ctcl: from the document's topic), so
  // that the data give targets alone.
  virtual bool makes_sources() const { return false; }
  // Whether a spec that sets no privacy.delta gets 1 / (N ln N) (privacy.delta: auto) rather
  // than the global default 1e-5: ctcl, as its paper and reference code.
  virtual bool delta_auto_by_default() const { return false; }
  // Whether this method bounds each unit of privacy.unit (core/privacy/units.hpp) by its
  // sensitivity, so its guarantee is per that unit; check_task refuses the others.
  virtual bool honours_unit(privacy::PrivacyUnit unit) const {
    return unit == privacy::PrivacyUnit::kExample;
  }
  // Whether its training steps are dp_sgd::run_dp_sgd's (train::clipped_sum), which clips the
  // parts of privacy.clipping_style (per_layer, groups) and adapts C (adaptive_clip_quantile);
  // the other methods refuse those options.
  virtual bool steps_by_dp_sgd() const { return false; }
  // Whether this method (as configured) reads data.public; other methods refuse it.
  virtual bool reads_public_data() const { return false; }
  // Artefacts the method's own options name (dp-sft's method.file), judged with the spec's.
  virtual std::vector<InputArtefact> input_artefacts() const { return {}; }
  // The DP releases a run on a private set of `dataset_size` examples makes itself (for the
  // ledger's budget check and `dpft account --spec`), its noise calibrated with the releases it
  // `inherited` composed in (train::choose_noise); {} for a method that releases nothing.
  // Resolves and keeps the method's DP settings: called once per run, before run().
  virtual std::vector<privacy::Release> plan(const Spec& spec, int64_t dataset_size,
                                             const Inheritance& inherited) {
    return {};
  }
  // The settings plan() resolved that the releases rest on (sigma, q, C, divisor, noise std),
  // for the run's privacy lock (core/run/privacy_lock.hpp); null for a method without any.
  virtual nlohmann::json plan_settings() const { return nullptr; }
  // The texts the method generates from public inputs alone (the model, the prompts and
  // spec.seed) before it reads any private row, exactly as a run of `spec` on `in` generates
  // them; {} for a method without any. pe / aug-pe: the initial population P_0. The audit
  // draws its strongest canaries from them (methods/audit/one_run_audit.hpp).
  virtual std::vector<std::string> public_candidates(const Spec& spec,
                                                     train::TrainInputs& in) const {
    return {};
  }
  // Run the method. Long loops poll dpft::interrupted() and return early when it is set.
  // `in` is empty for a method that does not train.
  virtual nlohmann::json run(RunContext& ctx, train::TrainInputs& in) = 0;
};

// A method class derives from MethodOf<itself, its base> (its base: Method or StepReleaseMethod),
// which writes clone() as a plain copy.
template <class Derived, class Base = Method>
class MethodOf : public Base {
 public:
  using Base::Base;
  std::unique_ptr<Method> clone() const final {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// data.task classification with a method that trains language models only: a ConfigError
// naming the methods that can.
void check_task(const Method& m, const Spec& spec);
// ConfigError when the loaded model is an encoder (a causal BERT under data.task lm) and the
// method cannot train one.
void check_model(const Method& m, const train::TrainInputs& in);

// Base of the methods that make one subsampled Gaussian release per step (dp-sgd, sft+dp-sgd
// and the projection methods): T = train.steps releases at resolve_dp's q and sigma, with the
// noise std the method's noise_std() states.
class StepReleaseMethod : public Method {
 public:
  // Every privacy.unit: the trainer samples units (users, documents) and groups each one's
  // rows (BatchStats::unit_starts); the step clips each sampled unit's summed gradient as one
  // (train::clipped_sum; the projection methods: H per unit, train::unit_rows_sum).
  bool honours_unit(privacy::PrivacyUnit) const override { return true; }
  std::vector<privacy::Release> plan(const Spec& spec, int64_t dataset_size,
                                     const Inheritance& inherited) override;
  nlohmann::json plan_settings() const override { return dp().to_json(); }

 protected:
  // The settings plan() resolved; RuntimeError before plan().
  const train::DpSettings& dp() const;
  // Sets the noise std(s) the method draws with (default: sigma C from resolve_dp); called by
  // plan() after resolving.
  virtual void set_noise_std(train::DpSettings& dp, const Spec& spec) const {}

 private:
  std::optional<train::DpSettings> dp_;
};

}  // namespace dpft
