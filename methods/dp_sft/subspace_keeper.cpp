#include "methods/dp_sft/subspace_keeper.hpp"

#include <spdlog/spdlog.h>

#include <cmath>

#include "core/dist/world.hpp"
#include "core/model/safetensors.hpp"
#include "core/run/run_dir.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"
#include "core/util/system.hpp"

namespace dpft::dp_sft {

namespace fs = std::filesystem;

namespace {

// The trainable parameters flattened into one float32 CPU vector (d), params order.
torch::Tensor flat_params(const NamedParams& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : params)
    parts.push_back(t.detach().reshape(-1).to(torch::kCPU, torch::kFloat32));
  return torch::cat(parts);
}

}  // namespace

SubspaceKeeper::SubspaceKeeper(RunContext& ctx, NamedParams params, const DpSftOptions& o,
                               int64_t T1)
    : ctx_(ctx), params_(std::move(params)), o_(o), T1_(T1) {
  DPFT_CHECK_AS(ConfigError, !dist::active(),
                "method dp-sft runs in one process for now (its trajectory and subspace are "
                "written by one writer); run it without --nproc");
  entries_ = project::param_entries(params_);
  theta0_file_ = ctx.dir.file("theta0.safetensors");
  sub_file_ = ctx.dir.file("subspace.safetensors");
  // Theta_0: kept in the run directory so a resumed run subtracts the same start.
  if (ctx.resume && fs::exists(theta0_file_)) {
    theta0_ = model::SafetensorsFile::open(theta0_file_)->load("theta0");
  } else {
    theta0_ = flat_params(params_);
    if (T1 > 0) model::save_safetensors(theta0_file_, {{"theta0", theta0_}});
  }
  const int64_t d = theta0_.numel();
  int64_t trained = 0;
  for (const auto& e : entries_) trained += e.numel();
  DPFT_CHECK_AS(InputError, d == trained, "dp-sft: {} holds {} values, the model trains {}",
                theta0_file_.string(), d, trained);
  // Memory: P (d x k) lives on the model's device; on the CPU, check it fits before training.
  const double need_mb = project::subspace_memory_mb(d, o.k, o.storage, o.chunk_mb);
  spdlog::info("dp-sft: d {} trainable values, k {}: the subspace needs about {:.0f} MiB", d, o.k,
               need_mb);
  if (params_.front().second.device().is_cpu())
    project::check_subspace_memory(need_mb, available_memory_mb(), d, o.k, o.storage);
  NamedParams base;
  int64_t off = 0;
  for (const auto& e : entries_) {
    base.push_back({e.name, theta0_.slice(0, off, off + e.numel()).view(e.shape)});
    off += e.numel();
  }
  base_sha_ = project::params_sha256(base);
  if (T1 > 0) {
    traj_ = std::make_unique<project::Trajectory>(ctx.dir.file("trajectory"), d);
    y_ = T1 / o.k;  // Alg. 1 line 2: y = floor(T1 / k)
  }
}

SubspaceKeeper::~SubspaceKeeper() = default;

void SubspaceKeeper::record(int64_t done) {
  if (done <= T1_ && done % y_ == 0 && traj_->rows() < o_.k)
    traj_->append(flat_params(params_) - theta0_);
}

void SubspaceKeeper::compute(nlohmann::json provenance) {
  if (!o_.keep_trajectory && traj_->rows() < o_.k && fs::exists(sub_file_)) {
    // A resume from the checkpoint at the end of stage 1 after P was saved and the trajectory
    // removed: the saved P is the one computed from it.
    use(project::load_subspace(sub_file_));
    return;
  }
  DPFT_CHECK(traj_->rows() == o_.k, "dp-sft: stage 1 recorded {} trajectory rows, not k = {}",
             traj_->rows(), o_.k);
  project::Subspace s;
  s.P = project::subspace_from_trajectory(*traj_, o_.k, &s.singular_values, o_.storage);
  s.params = entries_;
  s.base_sha256 = base_sha_;
  s.source = enum_name(o_.source, kSourceNames);
  s.provenance = std::move(provenance);
  project::save_subspace(sub_file_, s);
  if (!o_.keep_trajectory) {  // k x d floats no later step reads (the size of P again)
    traj_->truncate(0);
    fs::remove_all(traj_->dir());
  }
  use(std::move(s));
}

void SubspaceKeeper::use(project::Subspace s) {
  project::check_applies(s, entries_, base_sha_);
  DPFT_CHECK_AS(ConfigError, s.k() == o_.k, "subspace {} has k = {} but method.k is {}", s.where(),
                s.k(), o_.k);
  s.P = s.P.to(params_.front().second.device());
  sub_ = std::move(s);
  blocks_ = sub_.blocks();
  spdlog::info("dp-sft: subspace k {} over d {} ({}; top-k energy share {:.4f})", sub_.k(),
               sub_.dim(), sub_.where(), sub_.energy_top_k());
}

std::vector<torch::Tensor> SubspaceKeeper::lift(const torch::Tensor& gs) const {
  std::vector<torch::Tensor> g;
  for (size_t i = 0; i < blocks_.size(); ++i)
    g.push_back(project::lift_block(blocks_[i], gs).view(params_[i].second.sizes()));
  return g;
}

double SubspaceKeeper::residual(const std::vector<torch::Tensor>& g) const {
  torch::Tensor ptg = torch::zeros({o_.k}, torch::kFloat64);  // P^T g (k)
  for (size_t i = 0; i < blocks_.size(); ++i)
    ptg += torch::mv(blocks_[i].t().to(torch::kFloat32), g[i].reshape({-1}))
               .to(torch::kCPU, torch::kFloat64);
  double gg = 0, rr = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const torch::Tensor gi = g[i].reshape({-1}).to(torch::kFloat64);
    gg += gi.pow(2).sum().item<double>();
    rr += (gi - project::lift_block(blocks_[i], ptg).to(gi.device(), torch::kFloat64))
              .pow(2)
              .sum()
              .item<double>();
  }
  return gg > 0 ? std::sqrt(rr / gg) : 0.0;
}

nlohmann::json SubspaceKeeper::state_files() const {
  std::vector<fs::path> files = {theta0_file_, sub_file_};
  for (int64_t i = 0; traj_ && i < traj_->rows(); ++i) files.push_back(traj_->row_file(i));
  nlohmann::json hashes = nlohmann::json::object();
  for (const fs::path& p : files)
    if (fs::exists(p))
      hashes[fs::relative(p, ctx_.dir.path()).generic_string()] = sha256_file_hex(p);
  return hashes;
}

nlohmann::json SubspaceKeeper::save_state() const {
  return nlohmann::json{{"trajectory_rows", traj_ ? traj_->rows() : 0},
                        {"subspace_ready", !blocks_.empty() && T1_ > 0},
                        {"files", state_files()}};
}

void SubspaceKeeper::load_state(const nlohmann::json& j) {
  const nlohmann::json files = j.value("files", nlohmann::json::object());
  for (auto it = files.begin(); it != files.end(); ++it) {
    const std::string rel = it.key(), sha = it.value().get<std::string>();
    const fs::path p = ctx_.dir.path() / rel;
    const bool row = rel.rfind("trajectory/", 0) == 0;
    if (!fs::exists(p) && row && (!traj_ || traj_->rows() == 0) && fs::exists(sub_file_))
      continue;  // all rows removed when P was saved (method.keep_trajectory: false)
    DPFT_CHECK_AS(InputError, fs::exists(p) && sha256_file_hex(p) == sha,
                  "--resume: refused: {} is {} since the last checkpoint; a resume must read "
                  "back what the run wrote: restore it, or start a new run",
                  p.string(), fs::exists(p) ? "changed" : "missing");
  }
  if (traj_) traj_->truncate(j.at("trajectory_rows").get<int64_t>());
  if (j.at("subspace_ready").get<bool>()) use(project::load_subspace(sub_file_));
}

void SubspaceKeeper::finish() {
  if (traj_ && !o_.keep_trajectory) fs::remove_all(traj_->dir());
  if (T1_ > 0 && !o_.keep_subspace) fs::remove(sub_file_);
}

}  // namespace dpft::dp_sft
