// One logical batch of DP-SGD (Abadi et al. 2016, Alg. 1): per-sample gradients of the rows
// drawn by the Poisson sampler, in physical micro-batches; each clipped to norm C,
//   clip:      g_b * min(1, C / ||g_b||)                       (Abadi et al. 2016, Eq. "clip")
//   normalize: g_b * C / (||g_b|| + gamma), gamma = 0.01        (Bu et al. 2023, AUTO-S;
//              Clipping::kAutoClip in core/privacy/modes.hpp)
// summed (both keep ||.|| <= C, the sensitivity the noise is calibrated to); then Gaussian noise
// N(0, sigma^2 C^2) per coordinate is added once, and the result divided by q N or by the
// realised batch size. C = inf with sigma = 0 gives the plain sum (clip-only / no-clip runs).
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <vector>

#include "core/grad/per_sample.hpp"
#include "core/lm/examples.hpp"
#include "core/privacy/mechanism.hpp"
#include "core/train/dp_settings.hpp"

namespace dpft::train {

struct BatchStats {
  // Input, set by the trainer: the 0-based step this batch is for. Masked-LM batches draw their
  // masks with draw = step + 1 (lm::collate), so a resumed run masks as the uninterrupted one.
  int64_t step = 0;
  // Input, set by the trainer at privacy.unit user: where each sampled unit's rows begin in the
  // step's rows (units one after another); empty when every row is its own unit.
  std::vector<int64_t> unit_starts;
  int64_t batch_size = 0;       // realised |B|
  double loss = 0;              // mean per-sample loss over the batch (0 if empty)
  double grad_norm_mean = 0;    // mean per-sample gradient norm (before clipping)
  double clipped_fraction = 0;  // share of samples with ||g_b|| > C
  // units counted (a finite gradient) above C (some part above its threshold), and at most C:
  // adaptive clipping's count (core/train/adaptive_clip.hpp)
  int64_t clipped = 0, unclipped = 0;
  double clipped_norm_mean = 0;  // mean per-sample norm after clipping, ||w_b g_b||
  int64_t dropped = 0;          // samples left out for a non-finite per-sample gradient
  double grad_seconds = 0;      // forward + backward + norms + sums
  double noise_seconds = 0;
  nlohmann::json extra;  // method-specific per-step values (an object), merged into history
};

// The masking draw of a training batch (lm::collate): step + 1; evaluation uses draw 0.
inline uint64_t batch_draw(const BatchStats& st) {
  return static_cast<uint64_t>(st.step) + 1;
}

// Per-sample clipping weights w_b for norms (B): clip or normalize, as above.
torch::Tensor clip_weights(const torch::Tensor& norms, double clip_norm,
                           privacy::Clipping clipping);

// The parts a per-sample gradient is clipped in (privacy.clipping_style; core/privacy/modes.hpp):
// flat: one part at C; per_layer: each trainable parameter its own part, threshold C / sqrt(P);
// groups: privacy.clip_groups, each parameter in the one group whose `params` its name contains
// (ConfigError, exit 2, naming the parameter when none or several do, or naming a group that
// holds none), threshold C sqrt(share_k / sum_j share_j). sqrt(sum_k C_k^2) = C, so a clipped
// per-sample gradient has norm at most C: the sensitivity the noise is calibrated to, unchanged.
struct ClipGroups {
  std::vector<int64_t> part_of;   // (P) each trainable parameter's part
  std::vector<double> threshold;  // (K) C_k
};
ClipGroups clip_groups(const DpSettings& dp, const std::vector<grad::GradParam>& params);

// sum_b w_b g_b over `rows` of `ds` (micro-batches of at most `micro_batch` rows), one tensor
// per trainable parameter (PerSampleGrads::params() order); under clipping_style per_layer or
// groups each part of g_b has its own weight (ClipGroups). With `unclipped`, also the plain sum
// sum_b g_b from the same pass (analysis only: diagnostics compare against it).
// When stats->unit_starts groups several rows into one unit (privacy.unit user), this is
// unit_clipped_sum: every caller clips what the run's privacy unit says, not what it chose.
std::vector<torch::Tensor> clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                       const std::vector<int64_t>& rows, int64_t micro_batch,
                                       int64_t pad_id, const DpSettings& dp, BatchStats* stats,
                                       std::vector<torch::Tensor>* unclipped = nullptr);

// privacy.unit user (core/privacy/units.hpp): sum_u c_u sum_{b in u} g_b over the sampled
// units u, c_u the clipping weight (clip or normalize, as clip_weights) of the unit's gradient
// norm ||sum_{b in u} g_b||, so one unit moves the sum by at most C however many rows it has.
// rows: the units' rows one unit after another; starts (U): where each unit's rows begin. The
// per-sample gradients are formed (PerSampleGrads::matrix, micro-batches of at most micro_batch
// rows; a unit may span several) and added into a (U, p) matrix of unit gradients (ConfigError
// when that would pass 2 GiB). A unit whose gradient is not finite contributes nothing (its rows
// counted in `dropped`). Stats: batch_size = U, loss the mean over rows, norms and the clipped
// share over units, extra.rows. One tensor per trainable parameter, float32; `unclipped` as
// clipped_sum's.
std::vector<torch::Tensor> unit_clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                            const std::vector<int64_t>& rows,
                                            const std::vector<int64_t>& starts, int64_t micro_batch,
                                            int64_t pad_id, const DpSettings& dp, BatchStats* stats,
                                            std::vector<torch::Tensor>* unclipped = nullptr);

// (U, d): row u the sum of per_row's (R, d) rows starts[u] .. starts[u + 1] - 1 (units one
// after another, as BatchStats::unit_starts). The PE-SGD family's H per unit.
torch::Tensor unit_rows_sum(const torch::Tensor& per_row, const std::vector<int64_t>& starts);

// The non-private gradient of `rows` by ordinary autograd: sum_b grad loss_b / denom, float32
// per parameter of `params` (zeros where no gradient reached it), micro-batches of micro_batch
// rows. Fills stats: batch_size, loss (mean), grad_seconds. Leaves the parameters' .grad empty.
// Method sgd's batches and DP-SFT's public stage 1.
std::vector<torch::Tensor> mean_gradient(model::CausalLMImpl& model,
                                         const std::vector<torch::Tensor>& params,
                                         const lm::LmDataset& ds, const std::vector<int64_t>& rows,
                                         int64_t micro_batch, int64_t pad_id, double denom,
                                         BatchStats& stats);

// DP-SFT stage 2 (paper 002, Alg. 2 lines 4-10): sum_b w_b P^T g_b in R^k, the per-sample
// gradients projected (PerSampleGrads::project; blocks: P's rows per trainable parameter) and
// clipped there to dp.clip_norm, so the sum has sensitivity C in R^k. Non-finite rows and
// stats as clipped_sum. Returns (k) float32. With units grouping rows (as clipped_sum), each
// unit's projected sum P^T sum_{b in u} g_b is clipped instead (stats over units).
torch::Tensor projected_clipped_sum(grad::PerSampleGrads& psg, const lm::LmDataset& ds,
                                    const std::vector<int64_t>& rows, int64_t micro_batch,
                                    int64_t pad_id, const std::vector<torch::Tensor>& blocks,
                                    const DpSettings& dp, BatchStats* stats);

// The step's boundary check (always on): every defined grads[i] is float32, on like[i]'s
// device, with like[i]'s shape (like: the optimizer's masters; names for the message).
// RuntimeError naming the parameter otherwise: a gradient left in a bfloat16 model's dtype
// fails here on the CPU, one made with default options fails here on a GPU.
void check_step_gradients(const std::vector<torch::Tensor>& grads,
                          const std::vector<torch::Tensor>& like,
                          const std::vector<std::string>& names);

// Data parallel (core/dist/world.hpp): this rank's share of a step's `rows`: dist::shard's at
// example level; with units (stats.unit_starts) whole units, units r, r + W, ..., and
// stats.unit_starts rewritten to this rank's rows. `rows` itself with one rank.
std::vector<int64_t> rank_rows(const std::vector<int64_t>& rows, BatchStats& stats);

// Data parallel (core/dist/world.hpp): `stats` filled by clipped_sum over one rank's shard ->
// the whole logical batch's (batch size, dropped: sums; loss, norm, clipped share: means), on
// every rank. One small all-reduce; nothing with one rank.
void reduce_batch_stats(BatchStats& stats);

// In place, the step's release through `mechanism` (the subsampled Gaussian on the clipped
// sum, sensitivity dp.clip_norm; its sigma must be dp.sigma): recorded on every rank, and rank
// 0 adds N(0, (sigma C)^2) (drawn parameter by parameter, in order) to its sum; the sums of all
// ranks' shards are added (one all-reduce; nothing with one rank), so the noise enters the
// total exactly once; then g /= divisor (q N, or max(|B|, 1) for "realized", |B| the whole
// logical batch). Every rank returns the same g. Returns the divisor. float32 sums only (a
// bfloat16 one is refused). Diagnostics only: `noise_norm`, the l2 norm of the noise (before
// division; rank 0, 0 without noise), and `signal_norm`, that of the summed clipped gradients
// without the noise (an extra all-reduce of a float64 copy when asked for).
double noise_and_scale(std::vector<torch::Tensor>& grads, const DpSettings& dp,
                       privacy::GaussianSum& mechanism, int64_t realized_batch, BatchStats* stats,
                       double* noise_norm = nullptr, double* signal_norm = nullptr);

}  // namespace dpft::train
