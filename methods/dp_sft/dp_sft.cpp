// Method `dp-sft` (paper 002, "DP-SFT", Algorithm 3): private fine-tuning in a task subspace.
//   Alg. 3 line 1   T1 = ceil(E1 |S| / (B k)) k steps of stage 1 (a multiple of k: one trajectory
//                   row every y = T1 / k steps), T2 = train.steps of stage 2
//   Alg. 3 line 2   stage 1 = Alg. 1: DP full fine-tuning (Poisson lots, clip C1, noise sigma1 C1,
//                   AdamW), appending flat(Theta_t - Theta_0) to the trajectory matrix A every y
//                   steps (core/project/subspace.hpp: streamed to <run>/trajectory/)
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
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>

#include "core/config/fields.hpp"
#include "core/config/ledger_options.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/project/subspace.hpp"
#include "core/run/provenance.hpp"
#include "core/train/privatize.hpp"
#include "core/train/trainer.hpp"
#include "core/util/seed.hpp"
#include "core/util/sha256.hpp"
#include "core/util/system.hpp"
#include "data/train_inputs.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

enum class SubspaceSource { kPrivate, kPublic, kFile };
inline constexpr std::array<EnumName<SubspaceSource>, 3> kSourceNames = {
    {{SubspaceSource::kPrivate, "private"},
     {SubspaceSource::kPublic, "public"},
     {SubspaceSource::kFile, "file"}}};
enum class Budget { kJoint, kSplit };
inline constexpr std::array<EnumName<Budget>, 2> kBudgetNames = {
    {{Budget::kJoint, "joint"}, {Budget::kSplit, "split"}}};

struct Stage1Options {
  double epochs = 1;                   // E1 (Alg. 3 line 1), used when steps is 0
  int64_t steps = 0;                   // T1 given directly (must be >= k)
  std::optional<double> lr;            // default train.lr
  std::optional<double> clip_norm;     // C1, default privacy.clip_norm
  std::optional<double> warmup_ratio;  // default train.warmup_ratio
};

class DpSftMethod : public Method {
 public:
  std::string name() const override { return "dp-sft"; }
  std::string label() const override { return "DP-SFT"; }
  bool trains_encoders() const override { return true; }
  bool reads_public_data() const override { return source_ == SubspaceSource::kPublic; }

  void configure(Fields& f) override {
    f.get("k", k_, Range::at_least(1));
    f.get_enum("source", source_, kSourceNames);
    f.get("file", file_);
    f.get("file_public", file_public_);
    std::string storage = "float32";
    f.get_choice("storage", storage, {"float32", "bfloat16"});
    storage_ = storage == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    f.get("split", split_, Range::open(0, 1));
    f.get_enum("budget", budget_, kBudgetNames);
    Fields s1 = f.child("stage1");
    s1.get("epochs", stage1_.epochs, Range::above(0));
    s1.get("steps", stage1_.steps, Range::at_least(0));
    s1.get("lr", stage1_.lr, Range::at_least(0));
    s1.get("clip_norm", stage1_.clip_norm, Range::above(0));
    s1.get("warmup_ratio", stage1_.warmup_ratio, Range::closed(0, 1));
    s1.finish();
    f.get_enum("grad_mode", grad_.mode, grad::kGradModeNames);
    f.get("max_materialize_mb", grad_.max_materialize_mb, Range::above(0));
    f.get("chunk_mb", chunk_mb_, Range::above(0));
    f.get("diagnostics", diagnostics_);
    f.get("keep_trajectory", keep_trajectory_);
    f.get("keep_subspace", keep_subspace_);
    if (source_ == SubspaceSource::kFile)
      DPFT_CHECK_AS(ConfigError, !file_.empty(),
                    "method.source: file needs method.file (a subspace.safetensors written by a "
                    "dp-sft run)");
    if (source_ != SubspaceSource::kFile && stage1_.steps > 0)
      DPFT_CHECK_AS(ConfigError, stage1_.steps >= k_,
                    "method.stage1.steps = {} records fewer than k = {} trajectory rows (one "
                    "every floor(T1 / k) steps); give at least k steps or lower method.k",
                    stage1_.steps, k_);
  }

  YAML::Node options_yaml() const override {
    YAML::Node n;
    n["k"] = k_;                                     // subspace dimension
    n["source"] = enum_name(source_, kSourceNames);  // private (DP stage 1) | public | file
    n["file"] = file_;                               // source file: a subspace.safetensors
    n["file_public"] = file_public_;  // a file without provenance, declared made from public data
    n["storage"] = storage_ == torch::kBFloat16 ? "bfloat16" : "float32";  // P's entries
    n["split"] = split_;                             // p1: stage 1's share of (epsilon, delta)
    n["budget"] = enum_name(budget_, kBudgetNames);  // joint | split (Theorem 3)
    YAML::Node s1;
    s1["epochs"] = stage1_.epochs;
    s1["steps"] = stage1_.steps;  // 0: ceil(E1 N / (B k)) k
    if (stage1_.lr) s1["lr"] = *stage1_.lr;
    if (stage1_.clip_norm) s1["clip_norm"] = *stage1_.clip_norm;
    if (stage1_.warmup_ratio) s1["warmup_ratio"] = *stage1_.warmup_ratio;
    n["stage1"] = s1;
    n["grad_mode"] = enum_name(grad_.mode, grad::kGradModeNames);
    n["max_materialize_mb"] = grad_.max_materialize_mb;
    n["chunk_mb"] = chunk_mb_;  // bounds the per-sample blocks materialised for P^T g_i
    n["diagnostics"] = diagnostics_;  // analysis only: norms around clipping / noise, residual
    n["keep_trajectory"] = keep_trajectory_;  // false: trajectory/ removed once P is saved
    n["keep_subspace"] = keep_subspace_;      // false: subspace.safetensors removed at the end
    return n;
  }

  // method.source: file: the subspace file, judged by its provenance with the run's other inputs
  // (docs/privacy.md, "Provenance"; core/run/provenance.hpp): made from this run's
  // private data by a DP run, its releases are inherited ("source: <label>"); by a non-private
  // run, refused; from other data, nothing; without provenance, refused unless
  // method.file_public.
  std::vector<InputArtefact> input_artefacts() const override {
    if (source_ != SubspaceSource::kFile) return {};
    const nlohmann::json j = project::subspace_provenance(file_);
    std::optional<Provenance> p;
    if (!j.is_null()) p = parse_provenance(j, file_);
    return {{"method.file", file_, p, file_public_, /*needs_provenance=*/true}};
  }

  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override {
    const PrivacySpec& p = spec.privacy;
    // Stage 2 is the spec's train.* and privacy.* block: its q, C, T = train.steps.
    train::DpSettings d2 = train::dp_settings_before_noise(spec, n);
    train::DpSettings d1 = d2;
    d1.clip_norm = stage1_.clip_norm.value_or(p.clip_norm);
    DPFT_CHECK_AS(ConfigError,
                  (source_ == SubspaceSource::kPublic) == !spec.data.public_data.path.empty(),
                  "method.source: public trains stage 1 on data.public, and only it reads it: "
                  "give data.public.path with source public, or remove data.public");
    // Only a private stage 1 is a release (a public one is free, a file has none).
    const int64_t T1 = source_ == SubspaceSource::kPrivate ? stage1_steps(spec, n) : 0;
    d1.steps = T1;
    if (const nlohmann::json* d = inherited.decision("method.file")) source_file_ = *d;
    nlohmann::json acct = {{"budget", enum_name(budget_, kBudgetNames)}};
    // sigma given: both stages use it, epsilon is computed; epsilon given: Theorem 3's split
    // or the joint calibration of both stages.
    const train::NoiseChoice choice = train::choose_noise(
        p, "dp-sft", "a DP model", inherited.releases,
        [&](privacy::Accountant& acc, double eps, double delta) {
          privacy::TwoStageCalibration c = privacy::calibrate_two_stage(
              acc, d1.q, T1, d2.q, d2.steps, eps, delta, split_, budget_ == Budget::kJoint);
          d1.sigma = c.sigma1;
          d2.sigma = c.sigma2;
          acct["epsilon_composed"] = c.epsilon;  // both stages, one accounting, at delta
          if (T1 > 0) {
            acct["split"] = {{"p1", split_},
                             {"stage1",
                              {{"sigma", c.split_sigma1},
                               {"epsilon", c.split_epsilon1},
                               {"delta", split_ * delta}}},
                             {"stage2",
                              {{"sigma", c.split_sigma2},
                               {"epsilon", c.split_epsilon2},
                               {"delta", (1 - split_) * delta}}},
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

  nlohmann::json plan_settings() const override {
    DPFT_CHECK(dp2_.has_value(), "dp-sft: settings read before plan()");
    nlohmann::json j = {{"k", k_},
                        {"source", enum_name(source_, kSourceNames)},
                        {"stage2", dp2_->to_json()},
                        {"accounting", accounting_}};
    if (dp1_->steps > 0) j["stage1"] = dp1_->to_json();
    if (source_ == SubspaceSource::kFile) j["source_file"] = source_file_;
    return j;
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override;

 private:
  // Alg. 3 line 1: T1 = ceil(E1 |S| / (B k)) k over stage 1's data set of n examples, so that
  // y = T1 / k is a whole number; or method.stage1.steps.
  int64_t stage1_steps(const Spec& spec, int64_t n) const {
    if (stage1_.steps > 0) return stage1_.steps;
    return static_cast<int64_t>(
               std::ceil(stage1_.epochs * static_cast<double>(n) /
                         (static_cast<double>(spec.train.batch_size) * static_cast<double>(k_)))) *
           k_;
  }

  bool file_public_ = false;
  nlohmann::json source_file_;           // what was decided about the source file, and why
  int64_t k_ = 32;
  SubspaceSource source_ = SubspaceSource::kPrivate;
  std::string file_;
  torch::ScalarType storage_ = torch::kFloat32;
  double split_ = 0.5;
  Budget budget_ = Budget::kJoint;
  Stage1Options stage1_;
  grad::GradOptions grad_;
  double chunk_mb_ = 256;
  bool diagnostics_ = false;
  bool keep_trajectory_ = false;
  bool keep_subspace_ = true;
  std::optional<train::DpSettings> dp1_, dp2_;
  nlohmann::json accounting_;
};

// The trainable parameters flattened into one float32 CPU vector (d), params order.
torch::Tensor flat_params(const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : params)
    parts.push_back(t.detach().reshape(-1).to(torch::kCPU, torch::kFloat32));
  return torch::cat(parts);
}

nlohmann::json DpSftMethod::run(RunContext& ctx, train::TrainInputs& in) {
  const Spec& spec = ctx.spec;
  const train::DpSettings& dp1 = *dp1_;
  const train::DpSettings& dp2 = *dp2_;
  const bool public_stage1 = source_ == SubspaceSource::kPublic;
  if (public_stage1) {
    // A non-private trajectory is DP only when its data are not the private data.
    DPFT_CHECK_AS(ConfigError, in.public_overlap == 0 || dp2.sigma == 0,
                  "data.public ({}): {} of its examples are also private training examples, so "
                  "a non-private stage 1 on it would leak them; use public data that holds no "
                  "training row (or method.source: private, the DP stage 1)",
                  spec.data.public_data.path, in.public_overlap);
    DPFT_CHECK_AS(InputError, in.public_train.size() > 0, "data.public ({}) has no usable examples",
                  spec.data.public_data.path);
  }
  const int64_t T1 = public_stage1 ? stage1_steps(spec, in.public_train.size()) : dp1.steps;
  auto params = model::trainable_parameters(in.model);
  const std::vector<project::ParamEntry> entries = project::param_entries(params);
  // Theta_0: kept in the run directory so a resumed run subtracts the same start.
  const fs::path theta0_file = ctx.dir.file("theta0.safetensors");
  torch::Tensor theta0;
  if (ctx.resume && fs::exists(theta0_file)) {
    theta0 = model::SafetensorsFile::open(theta0_file)->load("theta0");
  } else {
    theta0 = flat_params(params);
    if (T1 > 0) model::save_safetensors(theta0_file, {{"theta0", theta0}});
  }
  const int64_t d = theta0.numel();
  int64_t trained = 0;
  for (const auto& e : entries) trained += e.numel();
  DPFT_CHECK_AS(InputError, d == trained, "dp-sft: {} holds {} values, the model trains {}",
                theta0_file.string(), d, trained);
  DPFT_CHECK_AS(ConfigError, !dist::active(),
                "method dp-sft runs in one process for now (its trajectory and subspace are "
                "written by one writer); run it without --nproc");
  // Memory: P (d x k) lives on the model's device; on the CPU, check it fits before training.
  const double need_mb = project::subspace_memory_mb(d, k_, storage_, chunk_mb_);
  spdlog::info("dp-sft: d {} trainable values, k {}: the subspace needs about {:.0f} MiB", d, k_,
               need_mb);
  if (params.front().second.device().is_cpu())
    project::check_subspace_memory(need_mb, available_memory_mb(), d, k_, storage_);
  // The base weights' identity: a subspace is only ever applied to the model it came from.
  std::string base_sha;
  {
    std::vector<std::pair<std::string, torch::Tensor>> base;
    int64_t off = 0;
    for (const auto& e : entries) {
      base.push_back({e.name, theta0.slice(0, off, off + e.numel()).view(e.shape)});
      off += e.numel();
    }
    base_sha = project::params_sha256(base);
  }

  project::Subspace sub;
  std::vector<torch::Tensor> blocks;
  const fs::path sub_file = ctx.dir.file("subspace.safetensors");
  auto use_subspace = [&](project::Subspace s) {
    project::check_applies(s, entries, base_sha);
    DPFT_CHECK_AS(ConfigError, s.k() == k_, "subspace {} has k = {} but method.k is {}", s.where(),
                  s.k(), k_);
    const torch::Device dev = params.front().second.device();
    s.P = s.P.to(dev);
    sub = std::move(s);
    blocks = sub.blocks();
    spdlog::info("dp-sft: subspace k {} over d {} ({}; top-k energy share {:.4f})", sub.k(),
                 sub.dim(), sub.where(), sub.energy_top_k());
  };
  std::unique_ptr<project::Trajectory> traj;
  int64_t y = 0;
  if (T1 > 0) {
    traj = std::make_unique<project::Trajectory>(ctx.dir.file("trajectory"), d);
    y = T1 / k_;  // Alg. 1 line 2: y = floor(T1 / k)
  } else {
    use_subspace(project::load_subspace(file_));  // its releases: inherited (the ledger's first)
  }

  grad::PerSampleGrads psg(in.model, grad_);
  train::LoopOptions lo;
  lo.sampling = "poisson";
  lo.q = dp2.q;
  lo.method_info = {{"k", k_},
                    {"source", enum_name(source_, kSourceNames)},
                    {"trajectory_every", y},
                    {"storage", storage_ == torch::kBFloat16 ? "bfloat16" : "float32"}};
  const TrainSpec& tr = spec.train;
  if (T1 > 0) {
    train::Phase s1;
    s1.name = "stage1";
    s1.steps = T1;
    if (public_stage1) {  // public rows, shuffled batches of train.batch_size; nothing released
      s1.data = &in.public_train;
      s1.batch_size = tr.batch_size;
    } else {
      s1.release = privacy::Release{"dp-sft stage 1", dp1.sigma, dp1.q, 1};
    }
    s1.schedule = {tr.schedule, stage1_.lr.value_or(tr.lr),
                   stage1_.warmup_ratio.value_or(tr.warmup_ratio), T1};
    lo.phases.push_back(s1);
  }
  train::Phase s2;
  s2.name = "stage2";
  s2.steps = dp2.steps;
  s2.release = privacy::Release{"dp-sft stage 2", dp2.sigma, dp2.q, 1};
  // The two stages' releases (subsampled Gaussians on clipped sums) share one noise stream.
  privacy::GaussianSum& noise2 =
      ctx.privacy.gaussian_sum("noise", *s2.release, spec.privacy.noise_draw);
  privacy::GaussianSum* noise1 =
      T1 > 0 && !public_stage1
          ? &ctx.privacy.gaussian_sum("noise", *lo.phases[0].release, spec.privacy.noise_draw)
          : nullptr;
  s2.schedule = {tr.schedule, tr.lr, tr.warmup_ratio, dp2.steps};
  if (T1 > 0)
    s2.on_start = [&] {  // Alg. 3 line 3: P from the trajectory (post-processing of stage 1)
      if (!keep_trajectory_ && traj->rows() < k_ && fs::exists(sub_file)) {
        // A resume from the checkpoint at the end of stage 1 after P was saved and the
        // trajectory removed: the saved P is the one computed from it.
        use_subspace(project::load_subspace(sub_file));
        return;
      }
      DPFT_CHECK(traj->rows() == k_, "dp-sft: stage 1 recorded {} trajectory rows, not k = {}",
                 traj->rows(), k_);
      project::Subspace s;
      s.P = project::subspace_from_trajectory(*traj, k_, &s.singular_values, storage_);
      s.params = entries;
      s.base_sha256 = base_sha;
      s.source = enum_name(source_, kSourceNames);
      // What P embodies: stage 1's releases on the private data, or nothing private (a public
      // stage 1 saw data.public only).
      s.provenance = make_provenance(ctx);
      if (public_stage1) {
        const std::string& pub = spec.data.public_data.path;
        s.provenance["data"] = provenance_data({{{"path", pub}, {"sha256", sha256_file_hex(pub)}}},
                                               static_cast<int64_t>(in.public_train.size()));
        s.provenance["releases"] = nlohmann::json::array();
        s.provenance["private"] = false;
      }
      project::save_subspace(sub_file, s);
      if (!keep_trajectory_) {  // k x d floats no later step reads (the size of P again)
        traj->truncate(0);
        fs::remove_all(traj->dir());
      }
      use_subspace(std::move(s));
    };
  lo.phases.push_back(s2);
  // Alg. 1 lines 12-14: after step t with y | t, append flat(Theta_t - Theta_0).
  lo.after_step = [&](int64_t done) {
    if (done <= T1 && done % y == 0 && traj->rows() < k_)
      traj->append(flat_params(params) - theta0);
  };
  // Every file a resume reads back (Theta_0, the trajectory rows, P) is hashed into the
  // checkpoint: a changed one refuses the resume, naming it (a forged trajectory would be a
  // subspace nobody released). Rows may be gone only as P's saving removes them.
  auto state_files = [&] {
    std::vector<fs::path> files = {theta0_file, sub_file};
    for (int64_t i = 0; traj && i < traj->rows(); ++i) files.push_back(traj->row_file(i));
    nlohmann::json hashes = nlohmann::json::object();
    for (const fs::path& p : files)
      if (fs::exists(p))
        hashes[fs::relative(p, ctx.dir.path()).generic_string()] = sha256_file_hex(p);
    return hashes;
  };
  lo.save_state = [&] {
    return nlohmann::json{{"trajectory_rows", traj ? traj->rows() : 0},
                          {"subspace_ready", !blocks.empty() && T1 > 0},
                          {"files", state_files()}};
  };
  lo.load_state = [&](const nlohmann::json& j) {
    const nlohmann::json files = j.value("files", nlohmann::json::object());
    for (auto it = files.begin(); it != files.end(); ++it) {
      const std::string rel = it.key(), sha = it.value().get<std::string>();
      const fs::path p = ctx.dir.path() / rel;
      const bool row = rel.rfind("trajectory/", 0) == 0;
      if (!fs::exists(p) && row && (!traj || traj->rows() == 0) && fs::exists(sub_file))
        continue;  // all rows removed when P was saved (method.keep_trajectory: false)
      DPFT_CHECK_AS(InputError, fs::exists(p) && sha256_file_hex(p) == sha,
                    "--resume: refused: {} is {} since the last checkpoint; a resume must read "
                    "back what the run wrote: restore it, or start a new run",
                    p.string(), fs::exists(p) ? "changed" : "missing");
    }
    if (traj) traj->truncate(j.at("trajectory_rows").get<int64_t>());
    if (j.at("subspace_ready").get<bool>()) use_subspace(project::load_subspace(sub_file));
  };
  const int64_t micro = spec.train.micro_batch_size;
  // Noise and division (Alg. 1 lines 9-10, Alg. 2 lines 9-10); with method.diagnostics the
  // step's norms around them (the reference's grad_debug columns, non-private statistics).
  auto release = [&](std::vector<torch::Tensor>& g, const train::DpSettings& dp,
                     privacy::GaussianSum& mechanism, const std::vector<int64_t>& rows,
                     train::BatchStats& st) {
    double noise_norm = 0, sum_norm = 0;
    const double div = train::noise_and_scale(g, dp, mechanism, static_cast<int64_t>(rows.size()),
                                              &st, diagnostics_ ? &noise_norm : nullptr,
                                              diagnostics_ ? &sum_norm : nullptr);
    if (!diagnostics_) return;
    double sq = 0;
    for (const auto& t : g) sq += t.to(torch::kFloat64).pow(2).sum().item<double>();
    st.extra["dp_sft"] = {{"norm_before_clip_mean", st.grad_norm_mean},
                          {"norm_after_clip_mean", st.clipped_norm_mean},
                          {"sum_norm", sum_norm},
                          {"noise_norm", noise_norm},
                          {"noised_sum_norm", std::sqrt(sq) * div}};
  };
  // ||g - P P^T g|| / ||g|| of the batch's mean clipped full gradient g (clip C2 in the full
  // space; analysis only: a second pass over the batch, never fed back).
  auto residual = [&](const std::vector<int64_t>& rows, const train::BatchStats& st) {
    train::BatchStats tmp = st;
    const std::vector<torch::Tensor> g =
        train::clipped_sum(psg, in.train, rows, micro, in.pad_id, dp2, &tmp);
    torch::Tensor ptg = torch::zeros({k_}, torch::kFloat64);  // P^T g (k)
    for (size_t i = 0; i < blocks.size(); ++i)
      ptg += torch::mv(blocks[i].t().to(torch::kFloat32), g[i].reshape({-1}))
                 .to(torch::kCPU, torch::kFloat64);
    double gg = 0, rr = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const torch::Tensor gi = g[i].reshape({-1}).to(torch::kFloat64);
      gg += gi.pow(2).sum().item<double>();
      rr += (gi - project::lift_block(blocks[i], ptg).to(gi.device(), torch::kFloat64))
                .pow(2)
                .sum()
                .item<double>();
    }
    return gg > 0 ? std::sqrt(rr / gg) : 0.0;
  };
  train::Trainer trainer(ctx, in, lo, &noise2);
  in.model->train();
  spdlog::info(
      "dp-sft: stage 1 {} steps (sigma {:.4f}, C {}), stage 2 {} steps (sigma {:.4f}, "
      "C {}), q {:.5f}, k {}",
      T1, dp1.sigma, dp1.clip_norm, dp2.steps, dp2.sigma, dp2.clip_norm, dp2.q, k_);
  nlohmann::json out = trainer.run([&](const std::vector<int64_t>& rows, train::BatchStats& st) {
    if (st.step < T1 && public_stage1)  // Alg. 1 on public data, without privacy: plain mean
      return train::mean_gradient(*in.model, trainer.params(), in.public_train, rows, micro,
                                  in.pad_id, static_cast<double>(std::max<size_t>(rows.size(), 1)),
                                  st);
    if (st.step < T1) {  // Alg. 1 lines 5-11: clip to C1, sum, noise sigma1 C1, divide
      auto g = train::clipped_sum(psg, in.train, rows, micro, in.pad_id, dp1, &st);
      release(g, dp1, *noise1, rows, st);
      return g;
    }
    // Alg. 2 lines 4-11: g^s_i = P^T g_i clipped to C2 in R^k, summed, noise sigma2 C2 in R^k,
    // divided by the lot size
    std::vector<torch::Tensor> gs = {
        train::projected_clipped_sum(psg, in.train, rows, micro, in.pad_id, blocks, dp2, &st)};
    release(gs, dp2, noise2, rows, st);
    if (diagnostics_) st.extra["dp_sft"]["residual"] = residual(rows, st);
    // Alg. 2 lines 12-13: g~ = P g~^s, reshaped to the parameters
    std::vector<torch::Tensor> g;
    for (size_t i = 0; i < blocks.size(); ++i)
      g.push_back(project::lift_block(blocks[i], gs[0]).view(params[i].second.sizes()));
    return g;
  });
  if (diagnostics_) {  // stage 2's residual: mean, first and last step
    std::vector<double> r;
    for (const auto& h : out[kNonPrivate]["history"])
      if (h.contains("dp_sft") && h["dp_sft"].contains("residual"))
        r.push_back(h["dp_sft"]["residual"].get<double>());
    if (!r.empty()) {
      double mean = 0;
      for (double v : r) mean += v / static_cast<double>(r.size());
      out[kNonPrivate]["dp_sft_diagnostics"] = {{"residual_mean", mean},
                                                {"residual_first", r.front()},
                                                {"residual_last", r.back()},
                                                {"steps", r.size()}};
    }
  }
  if (out["train"]["steps_done"].get<int64_t>() == T1 + dp2.steps) {  // a stopped run needs them
    if (traj && !keep_trajectory_) fs::remove_all(traj->dir());
    if (T1 > 0 && !keep_subspace_) fs::remove(sub_file);
  }
  out["privacy"] = {{"stage2", dp2.to_json()}, {"accounting", accounting_}};
  if (dp1.steps > 0) out["privacy"]["stage1"] = dp1.to_json();
  if (public_stage1)
    out["privacy"]["stage1_public"] = {{"data", spec.data.public_data.path},
                                       {"examples", in.public_train.size()},
                                       {"steps", T1},
                                       {"batch_size", tr.batch_size}};
  out["privacy"]["secure_noise"] = spec.privacy.secure_noise;
  out["privacy"]["noise_draw"] = privacy::name_of(spec.privacy.noise_draw);
  if (!blocks.empty()) {
    nlohmann::json sv = nlohmann::json::array();
    if (sub.singular_values.defined())
      for (int64_t i = 0; i < sub.singular_values.numel(); ++i)
        sv.push_back(sub.singular_values[i].item<double>());
    out["subspace"] = {{"k", sub.k()},
                       {"dim", sub.dim()},
                       {"source", sub.source},
                       {"energy_top_k", sub.energy_top_k()},
                       {"singular_values", sv}};
    if (source_ == SubspaceSource::kFile) {
      out["subspace"]["file"] = file_;
      out["subspace"]["provenance"] = source_file_;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Method> make_dp_sft_method() {
  return std::make_unique<DpSftMethod>();
}

}  // namespace dpft
