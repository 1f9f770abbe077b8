#include "core/project/subspace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/model/safetensors.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"
#include "core/util/shape.hpp"

namespace dpft::project {

using torch::Tensor;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "dpft-subspace-1";
constexpr double kRankTol = 1e-7;  // s_k <= kRankTol s_1: A's rows do not span k directions

fs::path row_path(const fs::path& dir, int64_t i) {
  return dir / fmt::format("row-{:05d}.safetensors", i);
}

std::shared_ptr<model::SafetensorsFile> open_row(const fs::path& path, int64_t d) {
  auto f = model::SafetensorsFile::open(path);
  const model::TensorInfo* t = f->find("row");
  DPFT_CHECK_AS(InputError,
                t && t->dtype == model::DType::F32 && t->shape.size() == 1 && t->shape[0] == d,
                "{}: a trajectory row must hold one float32 tensor 'row' of {} values (this "
                "run's trainable parameters); delete the trajectory directory to start stage 1 "
                "afresh",
                path.string(), d);
  return f;
}

// Column chunk width so that `rows` float64 columns take about chunk_mb.
int64_t chunk_cols(int64_t rows, double chunk_mb) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(chunk_mb * (1 << 20) / (8.0 * std::max<int64_t>(rows, 1))));
}

}  // namespace

fs::path Trajectory::row_file(int64_t i) const {
  return row_path(dir_, i);
}

// ---------------------------------------------------------------------------------------------
Trajectory::Trajectory(fs::path dir, int64_t d) : dir_(std::move(dir)), d_(d) {
  DPFT_CHECK(d > 0, "trajectory: the row length must be positive, got {}", d);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  DPFT_CHECK(!ec && fs::is_directory(dir_), "cannot create the trajectory directory {}: {}",
             dir_.string(), ec.message());
  int64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().extension() == ".safetensors") ++n;
  for (int64_t i = 0; i < n; ++i) {
    const fs::path p = row_path(dir_, i);
    DPFT_CHECK_AS(InputError, fs::exists(p),
                  "trajectory {}: {} rows on disk but {} is missing (rows must be numbered "
                  "without gaps); delete the directory to start stage 1 afresh",
                  dir_.string(), n, p.filename().string());
    files_.push_back(open_row(p, d_));
  }
}

Trajectory::~Trajectory() = default;

void Trajectory::append(const Tensor& row) {
  DPFT_CHECK(row.defined() && row.numel() == d_ && row.is_floating_point(),
             "trajectory: a row must have {} floating-point values, got {}", d_,
             row.defined() ? shape_str(row.sizes()) : "none");
  const fs::path p = row_path(dir_, rows());
  model::save_safetensors(
      p, {{"row", row.detach().reshape(-1).to(torch::kCPU, torch::kFloat32).contiguous()}});
  files_.push_back(open_row(p, d_));
}

void Trajectory::truncate(int64_t m) {
  DPFT_CHECK(m >= 0, "trajectory: cannot keep {} rows", m);
  while (rows() > m) {
    files_.pop_back();
    fs::remove(row_path(dir_, rows()));
  }
}

Tensor Trajectory::columns(int64_t begin, int64_t end) const {
  DPFT_CHECK(0 <= begin && begin <= end && end <= d_,
             "trajectory: columns [{}, {}) out of range for {} columns", begin, end, d_);
  Tensor out = torch::empty({rows(), end - begin}, torch::kFloat32);
  for (int64_t i = 0; i < rows(); ++i) out[i].copy_(files_[i]->load_slice("row", begin, end));
  return out;
}

Tensor Trajectory::matrix() const {
  return columns(0, d_);
}

// ---------------------------------------------------------------------------------------------
int64_t ParamEntry::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

double Subspace::energy_top_k() const {
  if (!singular_values.defined() || singular_values.numel() == 0) return 0.0;
  Tensor s2 = singular_values.to(torch::kFloat64).pow(2);
  const double total = s2.sum().item<double>();
  const int64_t kk = std::min<int64_t>(k(), s2.numel());
  return total > 0 ? s2.slice(0, 0, kk).sum().item<double>() / total : 0.0;
}

std::vector<Tensor> Subspace::blocks() const {
  std::vector<Tensor> out;
  int64_t off = 0;
  for (const auto& p : params) {
    out.push_back(P.slice(0, off, off + p.numel()));
    off += p.numel();
  }
  DPFT_CHECK(off == dim(), "subspace: its parameters hold {} values but P has {} rows", off, dim());
  return out;
}

// ---------------------------------------------------------------------------------------------
Tensor subspace_from_trajectory(const Trajectory& A, int64_t k, Tensor* singular_values,
                                torch::ScalarType storage, double chunk_mb) {
  const int64_t m = A.rows(), d = A.dim();
  DPFT_CHECK(k >= 1 && k <= m,
             "subspace: k = {} needs 1 <= k <= the trajectory's {} rows (stage 1 records one "
             "row every floor(T1 / k) steps)",
             k, m);
  DPFT_CHECK(storage == torch::kFloat32 || storage == torch::kBFloat16,
             "subspace: P is stored as float32 or bfloat16");
  const int64_t w = chunk_cols(m, chunk_mb);
  // Gram matrix A A^T (m, m) in float64 over column chunks.
  Tensor gram = torch::zeros({m, m}, torch::kFloat64);
  for (int64_t c0 = 0; c0 < d; c0 += w) {
    Tensor C = A.columns(c0, std::min(d, c0 + w)).to(torch::kFloat64);
    gram.addmm_(C, C.t());
  }
  auto [evals, evecs] = torch::linalg_eigh(gram);  // ascending
  evals = evals.flip(0).clamp_min(0);
  evecs = evecs.flip(1);
  Tensor s = evals.sqrt();  // A's singular values, descending
  const double s1 = s[0].item<double>(), sk = s[k - 1].item<double>();
  if (!(sk > kRankTol * s1) || !(s1 > 0)) {
    const int64_t rank = (s > kRankTol * s1).sum().item<int64_t>();
    throw RuntimeError(fmt::format(
        "subspace: the trajectory matrix ({} rows) has numerical rank {} < k = {} (singular "
        "values {:.3g} .. {:.3g}): its rows do not span k directions. Use a smaller "
        "subspace.k, or a stage 1 whose parameters move (learning rate, steps)",
        m, s1 > 0 ? rank : 0, k, s1, sk));
  }
  if (singular_values) *singular_values = s;
  // P = A^T U_k S_k^-1 (d, k), chunk by chunk of A's columns (P's rows).
  Tensor W = evecs.slice(1, 0, k) / s.slice(0, 0, k).unsqueeze(0);  // (m, k)
  Tensor P = torch::empty({d, k}, torch::TensorOptions().dtype(storage));
  for (int64_t c0 = 0; c0 < d; c0 += w) {
    const int64_t c1 = std::min(d, c0 + w);
    P.slice(0, c0, c1).copy_(torch::mm(A.columns(c0, c1).to(torch::kFloat64).t(), W));
  }
  orthonormalize_columns_(P);  // what rounding to the storage left
  return P;
}

void orthonormalize_columns_(Tensor& P) {
  DPFT_CHECK(P.dim() == 2 && P.size(1) >= 1 && P.size(0) >= P.size(1),
             "orthonormalize_columns_: P must be (d, k) with d >= k >= 1, got {}",
             shape_str(P.sizes()));
  const int64_t d = P.size(0), k = P.size(1);
  const int64_t rw = std::max<int64_t>(1, (int64_t{1} << 22) / k);  // rows per slice
  const auto f64 = P.options().dtype(torch::kFloat64);
  Tensor PtP = torch::zeros({k, k}, f64);
  for (int64_t r0 = 0; r0 < d; r0 += rw) {
    Tensor rows = P.slice(0, r0, std::min(d, r0 + rw)).to(torch::kFloat64);
    PtP.addmm_(rows.t(), rows);
  }
  Tensor L = torch::linalg_cholesky(PtP);  // L L^T = P^T P; P <- P L^-T
  Tensor Linv_t = torch::linalg_solve_triangular(L, torch::eye(k, f64), /*upper=*/false).t();
  for (int64_t r0 = 0; r0 < d; r0 += rw) {
    Tensor rows = P.slice(0, r0, std::min(d, r0 + rw));
    rows.copy_(torch::mm(rows.to(torch::kFloat64), Linv_t));
  }
}

Tensor subspace_direct_svd(const Tensor& A, int64_t k) {
  DPFT_CHECK(A.dim() == 2 && k >= 1 && k <= std::min(A.size(0), A.size(1)),
             "subspace_direct_svd: A must be (m, d) with 1 <= k <= min(m, d)");
  auto [U, S, Vh] = torch::linalg_svd(A.to(torch::kFloat64), /*full_matrices=*/false);
  return Vh.slice(0, 0, k).t().contiguous();
}

Tensor lift_block(const Tensor& block, const Tensor& v) {
  DPFT_CHECK(block.dim() == 2 && v.dim() == 1 && block.size(1) == v.size(0),
             "lift_block: P's block is {} and the vector {}", shape_str(block.sizes()),
             shape_str(v.sizes()));
  const Tensor v32 = v.to(block.device(), torch::kFloat32);
  if (block.scalar_type() == torch::kFloat32) return torch::mv(block, v32);
  const int64_t n = block.size(0), rows = std::max<int64_t>(1, (int64_t{1} << 22) / v.size(0));
  Tensor out = torch::empty({n}, v32.options());
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    out.slice(0, r0, r1).copy_(torch::mv(block.slice(0, r0, r1).to(torch::kFloat32), v32));
  }
  return out;
}

double subspace_memory_mb(int64_t d, int64_t k, torch::ScalarType storage, double chunk_mb) {
  const double elem = storage == torch::kBFloat16 ? 2.0 : 4.0;
  return (static_cast<double>(d) * static_cast<double>(k) * elem +
          2.0 * static_cast<double>(d) * 4.0) /
             (1 << 20) +
         chunk_mb;
}

void check_subspace_memory(double need_mb, double available_mb, int64_t d, int64_t k,
                           torch::ScalarType storage) {
  if (!(available_mb > 0) || need_mb <= available_mb) return;
  throw ConfigError(fmt::format(
      "dp-sft: the subspace needs about {:.0f} MiB (P is {} x {} {} = {:.0f} MiB) but {:.0f} MiB "
      "are available. Ways out: method.storage: bfloat16 (half of P), a smaller method.k, or "
      "fewer trainable parameters (model.peft kind full with targets, or lora)",
      need_mb, d, k, storage == torch::kBFloat16 ? "bfloat16" : "float32",
      static_cast<double>(d) * static_cast<double>(k) * (storage == torch::kBFloat16 ? 2 : 4) /
          (1 << 20),
      available_mb));
}

// ---------------------------------------------------------------------------------------------
std::string params_sha256(const std::vector<std::pair<std::string, Tensor>>& params) {
  Sha256 h;
  for (const auto& [name, t] : params) {
    h.update(name);
    h.update(std::string(1, '\0'));
    h.update(shape_str(t.sizes()));
    Tensor v = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    h.update(v.data_ptr(), static_cast<size_t>(v.numel()) * sizeof(float));
  }
  return h.hex();
}

std::vector<ParamEntry> param_entries(const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<ParamEntry> out;
  for (const auto& [name, t] : params) out.push_back({name, t.sizes().vec()});
  return out;
}

void save_subspace(const fs::path& path, const Subspace& s) {
  DPFT_CHECK(s.P.defined() && s.P.dim() == 2, "save_subspace: P must be (d, k)");
  json params = json::array();
  for (const auto& p : s.params) params.push_back({{"name", p.name}, {"shape", p.shape}});
  std::map<std::string, std::string> meta = {{"format", kFormat},
                                             {"params", params.dump()},
                                             {"base_sha256", s.base_sha256},
                                             {"source", s.source},
                                             {"k", std::to_string(s.k())},
                                             {"energy_top_k", fmt::format("{}", s.energy_top_k())}};
  if (!s.provenance.is_null()) meta["dpft.provenance"] = s.provenance.dump();
  std::vector<std::pair<std::string, Tensor>> tensors = {{"P", s.P.to(torch::kCPU)}};
  if (s.singular_values.defined())
    tensors.push_back({"singular_values", s.singular_values.to(torch::kCPU, torch::kFloat64)});
  model::save_safetensors(path, tensors, meta);
}

json subspace_provenance(const fs::path& path) {
  auto f = model::SafetensorsFile::open(path);
  auto format = f->metadata().find("format");
  DPFT_CHECK_AS(InputError, format != f->metadata().end() && format->second == kFormat,
                "{}: not a dpft subspace file: metadata 'format' is not '{}' (write one with a "
                "dp-sft run, subspace.save)",
                path.string(), kFormat);
  auto it = f->metadata().find("dpft.provenance");
  if (it == f->metadata().end()) return nullptr;
  json j = json::parse(it->second, nullptr, false);
  DPFT_CHECK_AS(InputError, !j.is_discarded(), "{}: metadata 'dpft.provenance' is not JSON",
                path.string());
  return j;
}

Subspace load_subspace(const fs::path& path) {
  auto f = model::SafetensorsFile::open(path);
  auto bad = [&](const std::string& what) {
    return InputError(
        fmt::format("{}: not a dpft subspace file: {} (write one with a dp-sft run, "
                    "subspace.save)",
                    path.string(), what));
  };
  const auto& meta = f->metadata();
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) throw bad(fmt::format("metadata '{}' is missing", key));
    return it->second;
  };
  if (get("format") != kFormat)
    throw bad(fmt::format("format '{}', expected '{}'", get("format"), kFormat));
  Subspace s;
  s.P = f->load("P");
  if (s.P.dim() != 2 ||
      (s.P.scalar_type() != torch::kFloat32 && s.P.scalar_type() != torch::kBFloat16))
    throw bad("P must be a 2-D float32 or bfloat16 tensor");
  if (f->find("singular_values")) {
    s.singular_values = f->load("singular_values");
    if (s.singular_values.dim() != 1 || s.singular_values.scalar_type() != torch::kFloat64)
      throw bad("singular_values must be a 1-D float64 tensor");
  }
  s.base_sha256 = get("base_sha256");
  s.origin = path.string();
  auto src = meta.find("source");
  s.source = src == meta.end() ? "" : src->second;
  s.provenance = subspace_provenance(path);
  json params;
  try {
    params = json::parse(get("params"));
  } catch (const json::exception& e) {
    throw bad(fmt::format("metadata 'params' is not JSON ({})", e.what()));
  }
  if (!params.is_array()) throw bad("metadata 'params' must be a list");
  int64_t total = 0;
  for (const auto& p : params) {
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("shape") ||
        !p["shape"].is_array())
      throw bad("each entry of metadata 'params' needs a name and a shape");
    ParamEntry e{p["name"].get<std::string>(), {}};
    for (const auto& x : p["shape"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw bad(fmt::format("parameter '{}' has a bad shape", e.name));
      e.shape.push_back(x.get<int64_t>());
    }
    total += e.numel();
    s.params.push_back(std::move(e));
  }
  if (total != s.P.size(0))
    throw bad(fmt::format("its parameters hold {} values but P has {} rows", total, s.P.size(0)));
  return s;
}

void check_applies(const Subspace& s, const std::vector<ParamEntry>& params,
                   const std::string& base_sha256) {
  const std::string how =
      "a subspace applies only to the trainable parameters and base weights it was made from "
      "(same model.path, model.peft and seed)";
  for (size_t i = 0; i < std::max(s.params.size(), params.size()); ++i) {
    if (i >= s.params.size())
      throw ConfigError(
          fmt::format("subspace {}: this run trains '{}', which the subspace does "
                      "not cover; {}",
                      s.where(), params[i].name, how));
    if (i >= params.size())
      throw ConfigError(
          fmt::format("subspace {}: it covers '{}', which this run does not train; "
                      "{}",
                      s.where(), s.params[i].name, how));
    if (s.params[i].name != params[i].name || s.params[i].shape != params[i].shape)
      throw ConfigError(fmt::format(
          "subspace {}: parameter {} is '{}' {} in the subspace but '{}' {} in this run; {}",
          s.where(), i, s.params[i].name, shape_str(s.params[i].shape), params[i].name,
          shape_str(params[i].shape), how));
  }
  if (s.base_sha256 != base_sha256)
    throw ConfigError(
        fmt::format("subspace {}: it was made from other base weights (SHA-256 {} "
                    "there, {} here); {}",
                    s.where(), s.base_sha256.substr(0, 12), base_sha256.substr(0, 12), how));
}

}  // namespace dpft::project
