// Method `dp-sft` (paper 002, "DP-SFT", Algorithm 3): private fine-tuning in a task subspace.
//   Alg. 3 line 1   T1 = ceil(E1 |S| / (B k)) k steps of stage 1 (a multiple of k: one trajectory
//                   row every y = T1 / k steps), T2 = train.steps of stage 2
//   Alg. 3 line 2   stage 1 = Alg. 1: DP full fine-tuning (Poisson lots, clip C1, noise sigma1 C1,
//                   AdamW), appending flat(Theta_t - Theta_0) to the trajectory matrix A every y
//                   steps (methods/dp_sft/subspace_keeper.hpp: streamed to <run>/trajectory/)
//   Alg. 3 line 3   P = top-k right singular vectors of A (Eq. 4; the Gram route), saved as
//                   <run>/subspace.safetensors
//   Alg. 3 line 4   stage 2 = Alg. 2: per-sample g^s_i = P^T g_i (Eq. 5), clipped to C2 in R^k,
//                   summed, N(0, sigma2^2 C2^2 I_k) added (Eq. 6), divided by the lot size, mapped
//                   back g~ = P g~^s (Eq. 7), fresh AdamW with its own warmup
// method.source `public` runs stage 1 without privacy on data.public (shuffled batches, plain
// gradients, no release: the data are public; a set holding private training rows is refused
// unless the run is non-private), `file` skips stage 1 and trains in a saved subspace (the
// transfer experiments, Tables 4-5).
// Budget (core/privacy/calibrate.hpp, calibrate_two_stage): the split p1 + p2 = 1 of (epsilon,
// delta) with the paper's basic composition (`budget: split`, Theorem 3) or one joint accounting
// of both stages (`budget: joint`, the default); either way both stages are ledger releases.
// Options: methods/dp_sft/options.hpp; diagnostics and metrics: methods/dp_sft/report.hpp.
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>

#include "core/config/spec.hpp"
#include "core/model/peft.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/project/subspace.hpp"
#include "core/run/provenance.hpp"
#include "core/train/privatize.hpp"
#include "core/train/trainer.hpp"
#include "core/util/sha256.hpp"
#include "data/train_inputs.hpp"
#include "methods/dp_sft/options.hpp"
#include "methods/dp_sft/report.hpp"
#include "methods/dp_sft/subspace_keeper.hpp"
#include "methods/method.hpp"

namespace dpft::dp_sft {

namespace {

class DpSftMethod : public MethodOf<DpSftMethod> {
 public:
  std::string name() const override { return "dp-sft"; }
  std::string label() const override { return "DP-SFT"; }
  bool trains_encoders() const override { return true; }
  bool reads_public_data() const override { return o_.source == SubspaceSource::kPublic; }
  // privacy.unit user or document: both private stages clip each sampled unit's summed gradient
  // (stage 1, train::clipped_sum) or its projection P^T sum_{b in u} g_b (stage 2,
  // projected_clipped_sum)
  bool honours_unit(privacy::PrivacyUnit) const override { return true; }
  void configure(Fields& f) override { o_.configure(f); }

  // method.source: file: the subspace file, judged by its provenance with the run's other inputs
  // (docs/privacy.md, "Provenance"; core/run/provenance.hpp): made from this run's
  // private data by a DP run, its releases are inherited ("source: <label>"); by a non-private
  // run, refused; from other data, nothing; without provenance, refused unless
  // method.file_public.
  std::vector<InputArtefact> input_artefacts() const override {
    if (o_.source != SubspaceSource::kFile) return {};
    const nlohmann::json j = project::subspace_provenance(o_.file);
    std::optional<Provenance> p;
    if (!j.is_null()) p = parse_provenance(j, o_.file);
    return {{"method.file", o_.file, p, o_.file_public, /*needs_provenance=*/true}};
  }

  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override;

  nlohmann::json plan_settings() const override {
    DPFT_CHECK(dp2_.has_value(), "dp-sft: settings read before plan()");
    nlohmann::json j = {{"k", o_.k},
                        {"source", enum_name(o_.source, kSourceNames)},
                        {"stage2", dp2_->to_json()},
                        {"accounting", accounting_}};
    if (dp1_->steps > 0) j["stage1"] = dp1_->to_json();
    if (o_.source == SubspaceSource::kFile) j["source_file"] = source_file_;
    return j;
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override;

 private:
  // Alg. 3 line 1: T1 = ceil(E1 |S| / (B k)) k over stage 1's data set of n examples, so that
  // y = T1 / k is a whole number; or method.stage1.steps.
  int64_t stage1_steps(const Spec& spec, int64_t n) const {
    if (o_.stage1.steps > 0) return o_.stage1.steps;
    const double lots = o_.stage1.epochs * static_cast<double>(n) /
                        (static_cast<double>(spec.train.batch_size) * static_cast<double>(o_.k));
    return static_cast<int64_t>(std::ceil(lots)) * o_.k;
  }
  // The training phases: stage 1 (T1 > 0; DP, or on data.public) and stage 2.
  std::vector<train::Phase> phases(const Spec& spec, const train::TrainInputs& in,
                                   int64_t T1) const;
  // What P embodies: stage 1's releases on the private data, or nothing private (a public
  // stage 1 saw data.public only).
  nlohmann::json subspace_provenance(RunContext& ctx, const train::TrainInputs& in) const;

  DpSftOptions o_;
  nlohmann::json source_file_;  // what was decided about the source file, and why
  std::optional<train::DpSettings> dp1_, dp2_;
  nlohmann::json accounting_;
};

std::vector<privacy::Release> DpSftMethod::plan(const Spec& spec, int64_t n,
                                                const Inheritance& inherited) {
  const PrivacySpec& p = spec.privacy;
  // Stage 2 is the spec's train.* and privacy.* block: its q, C, T = train.steps.
  train::DpSettings d2 = train::dp_settings_before_noise(spec, n);
  train::DpSettings d1 = d2;
  d1.clip_norm = o_.stage1.clip_norm.value_or(p.clip_norm);
  DPFT_CHECK_AS(ConfigError,
                (o_.source == SubspaceSource::kPublic) == !spec.data.public_data.path.empty(),
                "method.source: public trains stage 1 on data.public, and only it reads it: "
                "give data.public.path with source public, or remove data.public");
  // Only a private stage 1 is a release (a public one is free, a file has none).
  const int64_t T1 = o_.source == SubspaceSource::kPrivate ? stage1_steps(spec, n) : 0;
  d1.steps = T1;
  if (const nlohmann::json* d = inherited.decision("method.file")) source_file_ = *d;
  nlohmann::json acct = {{"budget", enum_name(o_.budget, kBudgetNames)}};
  // sigma given: both stages use it, epsilon is computed; epsilon given: Theorem 3's split
  // or the joint calibration of both stages.
  const double split = o_.split;
  const train::NoiseChoice choice = train::choose_noise(
      p, "dp-sft", "a DP model", inherited.releases,
      [&](privacy::Accountant& acc, double eps, double delta) {
        privacy::TwoStageCalibration c = privacy::calibrate_two_stage(
            acc, d1.q, T1, d2.q, d2.steps, eps, delta, split, o_.budget == Budget::kJoint);
        d1.sigma = c.sigma1;
        d2.sigma = c.sigma2;
        acct["epsilon_composed"] = c.epsilon;  // both stages, one accounting, at delta
        if (T1 > 0) {
          acct["split"] = {{"p1", split},
                           {"stage1",
                            {{"sigma", c.split_sigma1},
                             {"epsilon", c.split_epsilon1},
                             {"delta", split * delta}}},
                           {"stage2",
                            {{"sigma", c.split_sigma2},
                             {"epsilon", c.split_epsilon2},
                             {"delta", (1 - split) * delta}}},
                           {"epsilon_total", eps}};  // Theorem 3: p1 eps + p2 eps
          acct["noise_scale_vs_split"] = c.scale;
        }
      });
  if (!choice.calibrated()) d1.sigma = d2.sigma = choice.sigma;
  d1.sigma_source = d2.sigma_source = choice.source;
  for (const train::DpSettings* d : {&d1, &d2})
    if (d->sigma > 0 && !std::isfinite(d->clip_norm))
      throw ConfigError(
          "dp-sft: a clip norm of inf leaves the sensitivity unbounded; set "
          "privacy.clip_norm and method.stage1.clip_norm finite");
  dp1_ = d1;
  dp2_ = d2;
  accounting_ = acct;
  std::vector<privacy::Release> out;
  if (T1 > 0) out.push_back({"dp-sft stage 1", d1.sigma, d1.q, T1});
  out.push_back({"dp-sft stage 2", d2.sigma, d2.q, d2.steps});
  return out;
}

std::vector<train::Phase> DpSftMethod::phases(const Spec& spec, const train::TrainInputs& in,
                                              int64_t T1) const {
  const TrainSpec& tr = spec.train;
  std::vector<train::Phase> out;
  if (T1 > 0) {
    train::Phase s1;
    s1.name = "stage1";
    s1.steps = T1;
    if (o_.source == SubspaceSource::kPublic) {  // public rows, shuffled; nothing released
      s1.data = &in.public_train;
      s1.batch_size = tr.batch_size;
    } else {
      s1.release = privacy::Release{"dp-sft stage 1", dp1_->sigma, dp1_->q, 1};
    }
    s1.schedule = {tr.schedule, o_.stage1.lr.value_or(tr.lr),
                   o_.stage1.warmup_ratio.value_or(tr.warmup_ratio), T1};
    out.push_back(s1);
  }
  train::Phase s2;
  s2.name = "stage2";
  s2.steps = dp2_->steps;
  s2.release = privacy::Release{"dp-sft stage 2", dp2_->sigma, dp2_->q, 1};
  s2.schedule = {tr.schedule, tr.lr, tr.warmup_ratio, dp2_->steps};
  out.push_back(s2);
  return out;
}

nlohmann::json DpSftMethod::subspace_provenance(RunContext& ctx,
                                                const train::TrainInputs& in) const {
  nlohmann::json p = make_provenance(ctx);
  if (o_.source != SubspaceSource::kPublic) return p;
  const std::string& pub = ctx.spec.data.public_data.path;
  p["data"] = provenance_data({{{"path", pub}, {"sha256", sha256_file_hex(pub)}}},
                              static_cast<int64_t>(in.public_train.size()));
  p["releases"] = nlohmann::json::array();
  p["private"] = false;
  return p;
}

nlohmann::json DpSftMethod::run(RunContext& ctx, train::TrainInputs& in) {
  const Spec& spec = ctx.spec;
  const train::DpSettings &dp1 = *dp1_, &dp2 = *dp2_;
  const bool public_stage1 = o_.source == SubspaceSource::kPublic;
  // A non-private trajectory is DP only when its data are not the private data.
  if (public_stage1) {
    DPFT_CHECK_AS(ConfigError, in.public_overlap == 0 || dp2.sigma == 0,
                  "data.public ({}): {} of its examples are also private training examples, so "
                  "a non-private stage 1 on it would leak them; use public data that holds no "
                  "training row (or method.source: private, the DP stage 1)",
                  spec.data.public_data.path, in.public_overlap);
    DPFT_CHECK_AS(InputError, in.public_train.size() > 0, "data.public ({}) has no usable examples",
                  spec.data.public_data.path);
  }
  // Alg. 3 line 1: T1 steps of stage 1 (0 with source: file), T2 = train.steps of stage 2
  const int64_t T1 = public_stage1 ? stage1_steps(spec, in.public_train.size()) : dp1.steps;
  auto params = model::trainable_parameters(in.model);
  SubspaceKeeper keeper(ctx, params, o_, T1);                // Theta_0, the trajectory A, P
  if (T1 == 0) keeper.use(project::load_subspace(o_.file));  // its releases: inherited
  train::LoopOptions lo;
  lo.sampling = train::Sampling::kPoisson;
  lo.q = dp2.q;
  lo.method_info = {{"k", o_.k},
                    {"source", enum_name(o_.source, kSourceNames)},
                    {"trajectory_every", keeper.every()},
                    {"storage", o_.storage_name()}};
  lo.phases = phases(spec, in, T1);
  // The two stages' releases (subsampled Gaussians on clipped sums) share one noise stream.
  privacy::GaussianSum& noise2 =
      ctx.privacy.gaussian_sum("noise", *lo.phases.back().release, spec.privacy.noise_draw);
  privacy::GaussianSum* noise1 =
      T1 > 0 && !public_stage1
          ? &ctx.privacy.gaussian_sum("noise", *lo.phases[0].release, spec.privacy.noise_draw)
          : nullptr;
  // Alg. 3 line 3 at stage 2's start: P from the trajectory (post-processing of stage 1)
  if (T1 > 0) lo.phases.back().on_start = [&] { keeper.compute(subspace_provenance(ctx, in)); };
  lo.after_step = [&](int64_t done) { keeper.record(done); };  // Alg. 1 lines 12-14
  lo.save_state = [&] { return keeper.save_state(); };
  lo.load_state = [&](const nlohmann::json& j) { keeper.load_state(j); };
  grad::PerSampleGrads psg(in.model, o_.grad);
  const int64_t micro = spec.train.micro_batch_size;
  train::Trainer trainer(ctx, in, lo, &noise2);
  in.model->train();
  spdlog::info(
      "dp-sft: stage 1 {} steps (sigma {:.4f}, C {}), stage 2 {} steps (sigma {:.4f}, "
      "C {}), q {:.5f}, k {}",
      T1, dp1.sigma, dp1.clip_norm, dp2.steps, dp2.sigma, dp2.clip_norm, dp2.q, o_.k);
  nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, train::BatchStats& st) {
    const int64_t lot = static_cast<int64_t>(rows.size());
    if (st.step < T1 && public_stage1)  // Alg. 1 on public data, without privacy: plain mean
      return train::mean_gradient(*in.model, trainer.params(), in.public_train, rows, micro,
                                  in.pad_id, static_cast<double>(std::max<int64_t>(lot, 1)), st);
    if (st.step < T1) {  // Alg. 1 lines 5-11: clip to C1, sum, noise sigma1 C1, divide
      auto g = train::clipped_sum(psg, in.train, rows, micro, in.pad_id, dp1, &st);
      noise_and_divide(g, dp1, *noise1, st.batch_size, st, o_.diagnostics);  // |B| in units
      return g;
    }
    // Alg. 2 lines 4-11: g^s_i = P^T g_i clipped to C2 in R^k, summed, noise sigma2 C2 in R^k,
    // divided by the lot size
    std::vector<torch::Tensor> gs = {train::projected_clipped_sum(
        psg, in.train, rows, micro, in.pad_id, keeper.blocks(), dp2, &st)};
    noise_and_divide(gs, dp2, noise2, st.batch_size, st, o_.diagnostics);
    if (o_.diagnostics) {  // analysis only: the residual of the batch's clipped mean gradient
      train::BatchStats tmp = st;
      st.extra["dp_sft"]["residual"] =
          keeper.residual(train::clipped_sum(psg, in.train, rows, micro, in.pad_id, dp2, &tmp));
    }
    return keeper.lift(gs[0]);  // Alg. 2 lines 12-13: g~ = P g~^s, reshaped to the parameters
  });
  if (out["train"]["steps_done"].get<int64_t>() == T1 + dp2.steps) keeper.finish();
  report(out,
         {spec, o_, dp1, dp2, accounting_, source_file_, T1,
          static_cast<int64_t>(in.public_train.size())},
         keeper);
  return out;
}

}  // namespace

}  // namespace dpft::dp_sft

namespace dpft {

std::unique_ptr<Method> make_dp_sft_method() {
  return std::make_unique<dp_sft::DpSftMethod>();
}

}  // namespace dpft
