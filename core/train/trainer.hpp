// The training loop every gradient method runs in (sgd, dp-sgd, and the projection methods):
//   base eval -> for step in [0, T): rows = sampler.next(); grads = method's gradient(rows);
//   optimizer step at the scheduled lr; periodic eval / checkpoint
//   -> final eval, per_sample.jsonl, adapter / model saved.
// The method supplies the gradient of a logical batch, privatised through its mechanism
// (core/privacy/mechanism.hpp), which records the step's release; the trainer checks that
// each step of a releasing phase made exactly one. The trainer checkpoints every stream of
// randomness: the batch sampler (Poisson, or epoch shuffling for non-private runs), the
// method's noise stream (through its mechanism), and LibTorch's global CPU
// generator (LoRA dropout). A checkpoint (<run>/checkpoint/) holds the trainable parameters,
// optimizer state, step, those RNG states, the ledger and the history, so that a resumed run
// ends with exactly the numbers of an uninterrupted one (CPU).
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/privacy/mechanism.hpp"
#include "core/run/run_context.hpp"
#include "core/train/privatize.hpp"
#include "core/train/schedule.hpp"
#include "core/train/setup.hpp"
#include "core/util/enum_names.hpp"

namespace dpft::train {

// A stretch of the loop with its own DP release, learning-rate schedule and optimizer state
// (DP-SFT's stage 1 and stage 2).
struct Phase {
  std::string name;
  int64_t steps = 0;                        // >= 1
  std::optional<privacy::Release> release;  // made once per step of the phase
  ScheduleOptions schedule;                 // restarts at the phase's first step
  // Runs right before the phase's first step (also when a --resume lands exactly there; not
  // when it lands inside the phase: load_state restores what it set up). Phases after the
  // first also start with fresh optimizer state.
  std::function<void()> on_start;
  // Public data (DP-SFT's public stage 1): the phase's rows are shuffled batches of batch_size
  // rows of this set (its own sampler, seeded from the run's seed and the phase's name, in the
  // checkpoint), and the run's private sampler does not move. Such a phase releases nothing
  // about the private data: it must have no release. null: the run's sampler over in.train.
  const lm::LmDataset* data = nullptr;
  int64_t batch_size = 0;
};

// How the loop draws each step's rows of the private set.
enum class Sampling { kPoisson, kShuffle };  // rate q | epochs of batch_size rows (non-private)
inline constexpr std::array<EnumName<Sampling>, 2> kSamplingNames = {
    {{Sampling::kPoisson, "poisson"}, {Sampling::kShuffle, "shuffle"}}};

struct LoopOptions {
  Sampling sampling = Sampling::kPoisson;
  double q = 1;                      // Poisson rate
  int64_t batch_size = 1;            // shuffle batch size
  std::optional<privacy::Release> release;  // made once per step (nullopt: nothing released)
  nlohmann::json method_info;               // stored under metrics["train"]["method"]
  // Called once before step 1 of a fresh run, after the base evaluation (never on resume):
  // e.g. PE-SGD's initial synthetic set and its non-private SFT. May train the model.
  std::function<void()> before_training;
  // When set (e.g. "sft"), the model is evaluated again right after before_training and the
  // result kept as metrics eval.<tag> (Table 9's "SFT" row: the model after synthetic SFT).
  std::string eval_after_prepare;
  // The method's own resumable state (e.g. the synthetic set), saved in every checkpoint and
  // handed back on --resume. Both or neither.
  std::function<nlohmann::json()> save_state;
  std::function<void(const nlohmann::json&)> load_state;
  // Consecutive phases (their releases need distinct labels). Empty: one phase of train.steps
  // steps with `release` and the train.* schedule.
  std::vector<Phase> phases;
  // Called after the optimizer step that completes step `done` (1-based), before the step's
  // checkpoint: e.g. DP-SFT's trajectory snapshots.
  std::function<void(int64_t done)> after_step;
  // Post-processing of the trained model (CTCL's generation), called once training is done,
  // after the final evaluation and the save and before the checkpoint is removed: a run killed
  // inside it is finished by --resume (which calls it again, without training). Its result is
  // returned under metrics[after_training_key].
  std::function<nlohmann::json()> after_training;
  std::string after_training_key = "after_training";
};

// Gradient of one logical batch: one tensor per trainable parameter (trainable_parameters()
// order). Fills stats (batch size and loss at least).
using GradientFn =
    std::function<std::vector<torch::Tensor>(const std::vector<int64_t>& rows, BatchStats& stats)>;

class Trainer {
 public:
  // `noise`: the mechanism whose noise stream the checkpoint saves and restores (null: none).
  Trainer(RunContext& ctx, TrainInputs& in, LoopOptions opts, privacy::Mechanism* noise);
  ~Trainer();
  // Runs (or, with ctx.resume, continues) the loop; returns the metrics blocks
  // ("train", "eval", "history", "timing").
  nlohmann::json run(const GradientFn& gradient);

  std::vector<torch::Tensor> params() const;  // trainable, in order

 private:
  struct State;
  std::unique_ptr<State> s_;
  void save_checkpoint();
  bool load_checkpoint();
  bool restore(const std::filesystem::path& dir);  // load_checkpoint's work; JSON errors escape
  // InputError unless the checkpoint carries this run's privacy lock, its integrity hash
  // matches, and its ledger holds one release per step.
  void verify_checkpoint(const nlohmann::json& state, const std::filesystem::path& dir) const;
  // RuntimeError "training diverged at step k: <cause>" when every example of the step was
  // dropped for a non-finite gradient, the loss is not finite, or a parameter is not finite.
  void check_finite(const BatchStats& st, int64_t step) const;
  nlohmann::json evaluate(const std::string& tag, int64_t step, bool per_sample);
  // eval.nlg at `step`: beam-search outputs for data.eval's sources (written to
  // generations/step-<step>.jsonl) and their BLEU, NIST, METEOR, ROUGE-L, CIDEr.
  nlohmann::json evaluate_nlg(int64_t step);
  // Data parallel (core/dist/world.hpp): every rank takes rank 0's step, parameters, optimizer
  // state and method state (after its resume or its before_training); returns rank 0's
  // `resumed`. A no-op with one rank.
  bool sync_from_root(bool resumed);
};

// Steps-to-accuracy (paper 003, Tables 2-3): for the fractions 0.9 and 0.95 of `reference`,
// the first evaluated step (base = 0, then eval.every's history, then the final evaluation)
// whose accuracy (the classifier's when the eval block has one, else token accuracy) reaches
// fraction x reference; null where none does. {reference, "0.9": {target, step}, "0.95": ...}.
nlohmann::json steps_to_accuracy(const nlohmann::json& base, const nlohmann::json& history,
                                 const nlohmann::json& final_eval, double reference);

}  // namespace dpft::train
