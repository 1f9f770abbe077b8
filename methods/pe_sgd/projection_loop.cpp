#include "methods/pe_sgd/projection_loop.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <optional>
#include <string>

#include "core/dist/world.hpp"
#include "core/eval/grad_diagnostics.hpp"
#include "core/run/run_dir.hpp"
#include "core/train/privatize.hpp"
#include "core/train/trainer.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"

namespace dpft::pe_sgd {

using torch::Tensor;

namespace {

// One run of Algorithm 1 (or a baseline on a fixed D): its state and its named steps.
class ProjectionLoop {
 public:
  ProjectionLoop(RunContext& ctx, train::TrainInputs& in, const train::DpSettings& dp,
                 const SyntheticOptions& so, const nlohmann::json& method_info,
                 const ProjectFn& project)
      : ctx_(ctx),
        spec_(ctx.spec),
        in_(in),
        dp_(dp),
        so_(so),
        project_(project),
        noise_(ctx.privacy.gaussian_sum("noise", dp.release(), ctx.spec.privacy.noise_draw)),
        psg_(in.model, so.grad),
        diag_(so.diagnostics_k) {
    spdlog::info("{}: sigma {:.4f} ({}), q {:.5f}, T {}, p {}, N {}, L {}",
                 method_info.value("name", ""), dp.sigma, dp.sigma_source, dp.q, dp.steps,
                 psg_.dim(), so.size, so.fold == 0 ? std::string("inf") : std::to_string(so.fold));
    gen_ = make_generator(spec_, in_, so_);
  }

  nlohmann::json run(const nlohmann::json& method_info, const nlohmann::json& privacy_extra) {
    train::LoopOptions lo;
    lo.sampling = train::Sampling::kPoisson;  // lines 4-5: B(t) <- PoissonSubSampling(B, q)
    lo.q = dp_.q;
    lo.release = dp_.release();
    lo.method_info = method_info;
    lo.before_training = [this] { initial_set(); };
    if (so_.sft_epochs > 0) lo.eval_after_prepare = "sft";  // the model after SFT on D(0)
    lo.save_state = [this] { return save_state(); };
    lo.load_state = [this](const nlohmann::json& j) { load_state(j); };
    train::Trainer trainer(ctx_, in_, lo, &noise_);
    in_.model->train();
    nlohmann::json out = trainer.run(
        [this](const std::vector<int64_t>& rows, train::BatchStats& st) { return step(rows, st); });
    out["privacy"] = dp_.to_json();
    out["privacy"]["secure_noise"] = spec_.privacy.secure_noise;
    out["privacy"]["noise_draw"] = privacy::name_of(spec_.privacy.noise_draw);
    for (auto& [k, v] : privacy_extra.items()) out["privacy"][k] = v;
    out["synthetic"] = {
        {"size", D_.size()},
        {"variation_fold", so_.fold == 0 ? nlohmann::json("inf") : nlohmann::json(so_.fold)},
        {"generator", so_.generator_model.empty() ? "trained model" : so_.generator_model},
        {"style", synth::name_of(gen_->style)},
        {"random_api", gen_stats_json(gen_->gen->random_stats)},
        {"variational_api", gen_stats_json(gen_->gen->variational_stats)}};
    if (spec_.output.non_private_stats) out[kNonPrivate]["timing"]["generation_s"] = gen_seconds_;
    if (so_.diagnostics) {  // parse_spec refuses diagnostics without output.non_private_stats
      nlohmann::json d = diag_.summary();
      if (!d.is_null()) out[kNonPrivate]["diagnostics"] = d;
    }
    return out;
  }

 private:
  // Lines 1-2, once before step 1 of a fresh run: D <- SynDataGeneration(empty, N, L, m), then
  // non-private SFT of m on D.
  void initial_set() {
    auto t0 = steady_now();
    set_D(synth::syn_data_generation(*gen_->gen, {}, so_.size, so_.fold, generation_seed(spec_, 0)),
          1, true);
    gen_seconds_ += seconds_since(t0);
    spdlog::info("synthetic set: {} samples ({:.1f} s)", D_.size(), seconds_since(t0));
    if (so_.sft_epochs > 0) synthetic_sft_epochs(in_.model, D_, so_, spec_, in_.pad_id);
  }

  // Line 10 of the previous step, with the model that step updated: seeds <- SampleSelection(z)
  // (ceil(N / L) of D's samples, drawn by |z|), D <- SynDataGeneration(seeds, N, L, m).
  void evolve() {
    auto t0 = steady_now();
    const int64_t n_d = D_.size();
    const int64_t count =
        so_.fold == 0 ? 0 : std::min<int64_t>(n_d, (so_.size + so_.fold - 1) / so_.fold);
    std::vector<std::string> seeds;
    const uint64_t select_seed =
        derive_seed(static_cast<uint64_t>(spec_.seed), "select") + static_cast<uint64_t>(step_);
    // Every rank holds the same z, D and model: each selects the same seeds and generates its
    // share of the prompt batches (SyntheticGenerator::set_sharded); all get every text.
    for (int64_t i : project::sample_selection(*pending_z_, count, select_seed))
      seeds.push_back(texts_[static_cast<size_t>(D_.items[static_cast<size_t>(i)].index)]);
    gen_->gen->set_sharded(true);
    std::vector<std::string> texts = synth::syn_data_generation(
        *gen_->gen, seeds, so_.size, so_.fold, generation_seed(spec_, step_));
    gen_->gen->set_sharded(false);
    set_D(std::move(texts), step_ + 1, true);
    gen_seconds_ += seconds_since(t0);
  }

  // One step t (0-based step_): lines 6-8, returning the direction line 9 feeds the optimizer.
  std::vector<Tensor> step(const std::vector<int64_t>& rows, train::BatchStats& st) {
    if (pending_z_ && so_.evolve) evolve();
    all_rows_.resize(static_cast<size_t>(D_.size()));
    for (int64_t i = 0; i < D_.size(); ++i) all_rows_[static_cast<size_t>(i)] = i;
    auto t1 = steady_now();
    const int64_t micro = spec_.train.micro_batch_size;
    // Data parallel: each rank computes the rows of its shards; every rank gets G and H whole.
    Tensor Gs = gather_rows(gradient_matrix(psg_, D_, dist::shard(all_rows_), micro, in_.pad_id),
                            D_.size());  // line 6: G (N, p)
    Tensor losses;
    Tensor Hs =
        gather_rows(gradient_matrix(psg_, in_.train, dist::shard(rows), micro, in_.pad_id, &losses),
                    static_cast<int64_t>(rows.size()));  // line 7: H (M, p)
    losses = gather_rows(losses.unsqueeze(1), static_cast<int64_t>(rows.size())).squeeze(1);
    if (!st.unit_starts.empty() && st.unit_starts.size() != rows.size())
      Hs = train::unit_rows_sum(Hs, st.unit_starts);  // privacy.unit user: h_u = sum_{j in u} h_j
    const int64_t M = Hs.size(0);                     // |B|, in privacy units
    project::ProjectionResult r;  // line 8: z, and the direction G z / divisor (rank 0 draws)
    if (dist::is_root()) {
      r = project_(ProjectionInput{Gs, Hs, step_, dp_.divisor_for(M), dp_.sigma, noise_});
      check_noise_std(r);
    } else {
      noise_.count_remote();  // rank 0 made the release: every rank's ledger counts it
    }
    share_projection(r);
    pending_z_ =
        r.z.defined()  // on the host: sample_selection and checkpoints read its values
            ? std::optional<Tensor>(r.z.detach().to(torch::kCPU, torch::kFloat32).contiguous())
            : std::nullopt;
    st.batch_size = M;
    st.loss = losses.numel() > 0 ? losses.mean().item<double>() : 0.0;
    st.grad_norm_mean = M > 0 ? Hs.norm(2, {1}).mean().item<double>() : 0.0;
    st.clipped_fraction = dist::is_root() ? project::clipped_fraction(r) : 0.0;  // above bound
    st.grad_seconds += seconds_since(t1);
    st.extra = {{"synthetic_size", D_.size()}};  // timing stays out of the (reproducible) history
    if (so_.diagnostics && M > 0 && dist::is_root())
      st.extra["diagnostics"] =
          diag_.record({Gs, Hs, r.direction, r.noised_norms, r.signal_norm, r.noise_norm, step_});
    ++step_;
    return unflatten(r.direction.to(torch::kFloat32), psg_.params());
  }

  // (n, p) matrix from this rank's rows part (dist::shard's positions of 0..n-1): the same
  // whole matrix on every rank (one all-reduce of zeros and the parts; part itself with one rank).
  static Tensor gather_rows(const Tensor& part, int64_t n) {
    if (!dist::active()) return part;
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    const std::vector<int64_t> mine = dist::shard(all);
    std::vector<Tensor> full{torch::zeros({n, part.size(1)}, part.options())};
    if (!mine.empty())
      full[0].index_copy_(0, torch::tensor(mine, torch::kInt64).to(part.device()), part);
    dist::all_reduce_sum(full, "the per-sample gradient matrices");
    return full[0];
  }

  // Rank 0's direction and z on every rank (one broadcast; nothing with one rank).
  void share_projection(project::ProjectionResult& r) const {
    if (!dist::active()) return;
    const bool root = dist::is_root();
    const int64_t nz = dist::broadcast_rows({root && r.z.defined() ? r.z.numel() : -1},
                                            "the projection's shape")[0];
    const torch::TensorOptions f32 =
        torch::TensorOptions().dtype(torch::kFloat32).device(psg_.params().front().param.device());
    std::vector<Tensor> v{root ? r.direction.detach().to(torch::kFloat32).contiguous()
                               : torch::zeros({psg_.dim()}, f32)};
    if (nz >= 0)
      v.push_back(root ? r.z.detach().to(torch::kFloat32).contiguous() : torch::zeros({nz}, f32));
    dist::broadcast(v, "the projected update");
    if (!root) {
      r.direction = v[0];
      if (nz >= 0) r.z = v[1];
    }
  }

  // The noise the projection drew is the noise the metrics report (DpSettings::noise_std).
  void check_noise_std(const project::ProjectionResult& r) const {
    auto same = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(1.0, b); };
    DPFT_CHECK(
        same(r.noise_std, dp_.noise_std()) && same(r.noise_std_residual, dp_.noise_std_residual),
        "the projection drew noise of std {} (residual {}), the run's settings say {} ({})",
        r.noise_std, r.noise_std_residual, dp_.noise_std(), dp_.noise_std_residual);
  }

  // D <- texts (example index = position in texts), written as synthetic/iter_<iter>.csv.
  void set_D(std::vector<std::string> t, int64_t iter, bool write) {
    texts_ = std::move(t);
    D_ = synthetic_dataset(texts_, gen_->gen->prompts().zero_shot, spec_, *in_.tok);
    d_iter_ = iter;
    DPFT_CHECK_AS(RuntimeError, D_.size() > 0,
                  "every synthetic sample was empty at iteration {}; check method.prompts and "
                  "method.generation",
                  iter);
    if (D_.size() < static_cast<int64_t>(texts_.size()))
      spdlog::warn("synthetic set: {} of {} samples were empty and dropped",
                   texts_.size() - D_.size(), texts_.size());
    if (write && so_.save_synthetic && dist::is_root()) save_synthetic_csv(ctx_.dir, texts_, iter);
  }

  nlohmann::json save_state() const {
    nlohmann::json z = nullptr;
    if (pending_z_) {
      Tensor c = pending_z_->contiguous();
      z = std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
    return nlohmann::json{
        {"step", step_}, {"texts", texts_}, {"d_iter", d_iter_}, {"pending_z", z}};
  }

  void load_state(const nlohmann::json& j) {
    step_ = j.at("step").get<int64_t>();
    set_D(j.at("texts").get<std::vector<std::string>>(), j.at("d_iter").get<int64_t>(), false);
    if (!j.at("pending_z").is_null())
      pending_z_ = torch::tensor(j.at("pending_z").get<std::vector<float>>());
    if (so_.diagnostics)
      spdlog::warn("diagnostics: principal angles restart from the resumed step");
  }

  RunContext& ctx_;
  const Spec& spec_;
  train::TrainInputs& in_;
  const train::DpSettings& dp_;
  const SyntheticOptions& so_;
  const ProjectFn& project_;
  privacy::GaussianSum& noise_;
  grad::PerSampleGrads psg_;
  std::unique_ptr<Generator> gen_;
  eval::ProjectionDiagnostics diag_;
  std::vector<std::string> texts_;   // D's texts
  lm::LmDataset D_;                  // D tokenised: the rows of G
  int64_t d_iter_ = 0;               // the step (1-based) D was made for
  std::optional<Tensor> pending_z_;  // the last step's z, for line 10
  int64_t step_ = 0;                 // 0-based index of the next step
  std::vector<int64_t> all_rows_;
  double gen_seconds_ = 0;
};

}  // namespace

nlohmann::json run_projection(RunContext& ctx, train::TrainInputs& in, const train::DpSettings& dp,
                              const SyntheticOptions& so, const nlohmann::json& method_info,
                              const nlohmann::json& privacy_extra, const ProjectFn& project) {
  ProjectionLoop loop(ctx, in, dp, so, method_info, project);
  return loop.run(method_info, privacy_extra);
}

Tensor gradient_matrix(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                       const std::vector<int64_t>& rows, int64_t micro, int64_t pad_id,
                       Tensor* losses) {
  std::vector<Tensor> parts, ls;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(micro)) {
    std::vector<int64_t> chunk(
        rows.begin() + i, rows.begin() + std::min(rows.size(), i + static_cast<size_t>(micro)));
    lm::LmBatch b = lm::collate(ds, chunk, pad_id);
    ls.push_back(psg.compute(b));
    parts.push_back(psg.matrix());
  }
  psg.release();
  if (losses) *losses = ls.empty() ? torch::zeros({0}) : torch::cat(ls);
  return parts.empty() ? torch::zeros({0, psg.dim()}) : torch::cat(parts);
}

std::vector<Tensor> unflatten(const Tensor& flat, const std::vector<grad::GradParam>& params) {
  std::vector<Tensor> out;
  int64_t off = 0;
  for (const auto& p : params) {
    int64_t n = p.param.numel();
    out.push_back(flat.narrow(0, off, n).view(p.param.sizes()).clone());
    off += n;
  }
  DPFT_CHECK(off == flat.numel(), "unflatten: {} values for {} parameters", flat.numel(), off);
  return out;
}

}  // namespace dpft::pe_sgd
