// DP-SFT's task subspace (paper 002, "DP-SFT", Stage 1 and Stage 2):
//   trajectory matrix   A = [Theta_1 - Theta_0; ...; Theta_m - Theta_0]   (m, d)   Eq. 3, Alg. 1
//                       lines 12-14 (one row every y = floor(T1 / k) steps)
//   subspace            P = top-k right singular vectors of A             (d, k)   Eq. 4, Alg. 1
//                       line 18
//   stage 2             g^s = P^T g (Eq. 5), g~ = P g~^s (Eq. 7)          (per-sample projection:
//                       grad::PerSampleGrads::project)
// A is streamed to disk a row at a time (Trajectory), so nothing of size m x d is held twice. P
// comes from the (m, m) Gram matrix A A^T = U S^2 U^T in float64 (m ~ k is small): P = A^T U_k
// S_k^-1, accumulated over column chunks of A, then re-orthonormalised (P <- P L^-T with L L^T =
// P^T P, float64). subspace_direct_svd() is the slow obvious reference (linalg_svd of A).
// A subspace file (safetensors: P, the singular values; metadata: the parameters' names and
// shapes in order, the SHA-256 of the base weights Theta_0) is never applied to another model.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dpft::model {
class SafetensorsFile;
}

namespace dpft::project {

namespace fs = std::filesystem;

// The trajectory matrix on disk: row i is `dir/row-NNNNN.safetensors` holding one float32 tensor
// "row" (d), written atomically and memory-mapped when read.
class Trajectory {
 public:
  // Opens `dir` (created if missing). Rows already there (a resumed stage 1) are kept; they
  // must be numbered 0..n-1 without gaps and hold d floats, else InputError naming the file.
  Trajectory(fs::path dir, int64_t d);
  ~Trajectory();
  Trajectory(const Trajectory&) = delete;
  Trajectory& operator=(const Trajectory&) = delete;

  int64_t rows() const { return static_cast<int64_t>(files_.size()); }
  int64_t dim() const { return d_; }
  const fs::path& dir() const { return dir_; }
  fs::path row_file(int64_t i) const;     // <dir>/row-<i, 5 digits>.safetensors
  void append(const torch::Tensor& row);  // (d), any floating dtype; stored float32
  void truncate(int64_t m);               // drop rows m.. (a resume from an earlier checkpoint)
  torch::Tensor columns(int64_t begin, int64_t end) const;  // (rows, end - begin) float32
  torch::Tensor matrix() const;  // (rows, d) float32: small d only (tests, the reference SVD)

 private:
  fs::path dir_;
  int64_t d_;
  std::vector<std::shared_ptr<model::SafetensorsFile>> files_;
};

struct ParamEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

struct Subspace {
  torch::Tensor P;                 // (d, k) orthonormal columns; float32 or bfloat16 storage
  torch::Tensor singular_values;   // (m) float64, descending: all of A's
  std::vector<ParamEntry> params;  // the flat order of d: names and shapes
  std::string base_sha256;         // params_sha256() of Theta_0
  std::string source;              // how P was made: "private" or "public" stage 1
  std::string origin;              // the file it was loaded from ("": made in this process)
  // The run that made it, its private data and releases (core/run/provenance.hpp), stored as
  // metadata "dpft.provenance"; null when the file has none.
  nlohmann::json provenance;
  std::string where() const { return origin.empty() ? "(" + source + ")" : origin; }
  int64_t k() const { return P.defined() ? P.size(1) : 0; }
  int64_t dim() const { return P.defined() ? P.size(0) : 0; }
  // Share of A's energy in the top k directions: sum_{i<k} s_i^2 / sum_i s_i^2.
  double energy_top_k() const;
  // The rows of P of each parameter, (numel, k) views in params order (for
  // PerSampleGrads::project and for mapping P g~^s back to parameter shapes).
  std::vector<torch::Tensor> blocks() const;
};

// P from the Gram route (above). chunk_mb bounds each column chunk of A read at once. Throws
// RuntimeError when k < 1, k > rows, or A's numerical rank is below k (s_k <= 1e-7 s_1: the rows
// do not span k directions; use a smaller k or a stage 1 that moves).
// storage: float32 or bfloat16 (P's entries; products still accumulate in float32 or wider).
torch::Tensor subspace_from_trajectory(const Trajectory& A, int64_t k,
                                       torch::Tensor* singular_values = nullptr,
                                       torch::ScalarType storage = torch::kFloat32,
                                       double chunk_mb = 256);
// In place, P (d, k) <- P L^-T with L L^T = P^T P (CholeskyQR in float64, a slice of rows at a
// time, on P's device): orthonormal columns spanning P's. float32 or bfloat16 P; full column
// rank (else linalg_cholesky throws).
void orthonormalize_columns_(torch::Tensor& P);
// The reference: top-k right singular vectors of A (m, d) by torch::linalg_svd in float64,
// (d, k) float64 (signs arbitrary: compare spans, not columns).
torch::Tensor subspace_direct_svd(const torch::Tensor& A, int64_t k);

// P_j v for one parameter's rows of P (Eq. 7, g~ = P g~^s): block (n, k) float32 or bfloat16,
// v (k) -> (n) float32; a bfloat16 block is converted a slice at a time.
torch::Tensor lift_block(const torch::Tensor& block, const torch::Tensor& v);

// Memory DP-SFT's subspace needs, MiB: P (d x k in `storage`), Theta_0 and a flat copy of the
// parameters (d float32 each), and the per-sample blocks (chunk_mb).
double subspace_memory_mb(int64_t d, int64_t k, torch::ScalarType storage, double chunk_mb);
// ConfigError naming the sizes and the ways out (bfloat16 storage of P, a smaller k, fewer
// trainable parameters) when need_mb exceeds available_mb (> 0; 0 = unknown: no check).
void check_subspace_memory(double need_mb, double available_mb, int64_t d, int64_t k,
                           torch::ScalarType storage);

// SHA-256 over the parameters in order: each name, shape and float32 little-endian values.
std::string params_sha256(const std::vector<std::pair<std::string, torch::Tensor>>& params);
std::vector<ParamEntry> param_entries(
    const std::vector<std::pair<std::string, torch::Tensor>>& params);

void save_subspace(const fs::path& path, const Subspace& s);  // atomic
// Validates the file (P 2-D float32/bfloat16, singular values 1-D, metadata present and
// consistent with P's rows); InputError naming the file otherwise.
Subspace load_subspace(const fs::path& path);
// The file's provenance metadata alone (without reading P); null when it has none.
nlohmann::json subspace_provenance(const fs::path& path);
// Refuses (ConfigError naming the first difference and the way out) a subspace whose parameter
// list differs from `params` or whose base weights hash differs from `base_sha256`.
void check_applies(const Subspace& s, const std::vector<ParamEntry>& params,
                   const std::string& base_sha256);

}  // namespace dpft::project
