#include "core/train/trainer.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <sstream>

#include "core/dist/world.hpp"
#include "core/eval/lm_eval.hpp"
#include "core/eval/nlg_eval.hpp"
#include "core/eval/verdict.hpp"
#include "core/train/eval_block.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/safetensors.hpp"
#include "core/privacy/sampler.hpp"
#include "core/run/privacy_lock.hpp"
#include "core/run/provenance.hpp"
#include "core/run/run_dir.hpp"
#include "core/train/optimizer.hpp"
#include "core/train/schedule.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/progress.hpp"
#include "core/util/seed.hpp"
#include "core/util/shape.hpp"
#include "core/util/signals.hpp"
#include "core/util/strings.hpp"

namespace dpft::train {

namespace fs = std::filesystem;
using torch::Tensor;

// Named (not anonymous): Trainer::State holds a ShuffleSampler, and in a unity build this file is
// not the main file, where GCC warns about members of anonymous-namespace types.
namespace trainer_detail {

// Epochs of fixed-size batches without replacement (non-private runs). State: the generator
// at the start of the current epoch, and the position in it.
class ShuffleSampler {
 public:
  ShuffleSampler(int64_t n, int64_t batch, uint64_t seed)
      : n_(n), batch_(std::max<int64_t>(1, batch)), rng_(seed) {
    new_epoch();
  }
  std::vector<int64_t> next() {
    if (pos_ >= n_) new_epoch();
    int64_t end = std::min(n_, pos_ + batch_);
    std::vector<int64_t> rows(perm_.begin() + pos_, perm_.begin() + end);
    pos_ = end;
    std::sort(rows.begin(), rows.end());
    return rows;
  }
  std::string state() const {
    std::ostringstream os;
    os << pos_ << " " << epoch_start_;
    return os.str();
  }
  void set_state(const std::string& s) {
    std::istringstream is(s);
    int64_t pos = 0;
    is >> pos >> rng_;
    DPFT_CHECK_AS(InputError, !is.fail(), "checkpoint: malformed shuffle sampler state");
    new_epoch();
    pos_ = pos;
  }

 private:
  int64_t n_, batch_, pos_ = 0;
  std::mt19937_64 rng_;
  std::string epoch_start_;
  std::vector<int64_t> perm_;
  void new_epoch() {
    std::ostringstream os;
    os << rng_;
    epoch_start_ = os.str();
    perm_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[static_cast<size_t>(i)] = i;
    for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates with an unbiased bounded draw
      std::uniform_int_distribution<int64_t> d(0, i);
      std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(d(rng_))]);
    }
    pos_ = 0;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace trainer_detail
using trainer_detail::median;
using trainer_detail::ShuffleSampler;

namespace {

// The rows of the sampled units, one unit after another; starts: where each begins.
std::vector<int64_t> unit_rows(const privacy::Units& units, const std::vector<int64_t>& sampled,
                               std::vector<int64_t>& starts) {
  std::vector<int64_t> rows;
  starts.clear();
  for (int64_t u : sampled) {
    starts.push_back(static_cast<int64_t>(rows.size()));
    const std::vector<int64_t>& r = units.rows.at(static_cast<size_t>(u));
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

}  // namespace

struct Trainer::State {
  RunContext& ctx;
  TrainInputs& in;
  LoopOptions opts;
  privacy::Mechanism* noise;  // whose noise stream the checkpoint carries (null: none)
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::unique_ptr<Optimizer> opt;
  std::vector<Phase> phases;         // opts.phases, or the one phase of train.steps
  std::vector<int64_t> phase_start;  // first step of each phase; back() = T
  int64_t started = -1;              // the last phase whose on_start ran in this process
  int64_t total_steps() const { return phase_start.back(); }
  size_t phase_of(int64_t step) const {  // the phase step `step` (0-based) belongs to
    size_t p = 0;
    while (p + 1 < phases.size() && step >= phase_start[p + 1]) ++p;
    return p;
  }
  std::unique_ptr<privacy::PoissonSampler> poisson;
  std::unique_ptr<ShuffleSampler> shuffle;
  std::vector<std::unique_ptr<ShuffleSampler>> phase_samplers;  // Phase::data phases, else null
  int64_t step = 0;
  nlohmann::json history = nlohmann::json::array(), eval_history = nlohmann::json::array();
  nlohmann::json nlg_history = nlohmann::json::array();  // eval.nlg, one entry per at_steps
  nlohmann::json eval_base, eval_prepared, eval_final;
  std::vector<double> step_seconds;
  double grad_seconds = 0, eval_seconds = 0;
  State(RunContext& c, TrainInputs& i) : ctx(c), in(i) {}
  fs::path ckpt_dir() const { return ctx.dir.path() / "checkpoint"; }
};

Trainer::Trainer(RunContext& ctx, TrainInputs& in, LoopOptions opts, privacy::Mechanism* noise)
    : s_(std::make_unique<State>(ctx, in)) {
  s_->opts = std::move(opts);
  s_->noise = noise;
  for (auto& [name, t] : model::trainable_parameters(in.model))
    s_->names.push_back(name), s_->params.push_back(t);
  const TrainSpec& tr = ctx.spec.train;
  OptimizerOptions oo;
  oo.kind = tr.optimizer;
  oo.weight_decay = tr.weight_decay;
  oo.momentum = tr.momentum;
  s_->opt = std::make_unique<Optimizer>(s_->params, oo);
  s_->phases = s_->opts.phases;
  if (s_->phases.empty()) {
    Phase one;
    one.name = "train";
    one.steps = tr.steps;
    one.release = s_->opts.release;
    one.schedule = ScheduleOptions{tr.schedule, tr.lr, tr.warmup_ratio, tr.steps};
    s_->phases.push_back(one);
  }
  s_->phase_start = {0};
  std::set<std::string> labels;
  for (const Phase& p : s_->phases) {
    DPFT_CHECK(p.steps >= 1, "training phase '{}' has {} steps", p.name, p.steps);
    DPFT_CHECK(p.schedule.total_steps == p.steps,
               "training phase '{}': its schedule spans {} steps, not its {}", p.name,
               p.schedule.total_steps, p.steps);
    if (p.release)
      DPFT_CHECK(labels.insert(p.release->label).second,
                 "training phases need distinct release labels ('{}' twice)", p.release->label);
    DPFT_CHECK(!p.data || (!p.release && p.batch_size >= 1),
               "training phase '{}' on public data needs a batch size and no release", p.name);
    s_->phase_start.push_back(s_->phase_start.back() + p.steps);
  }
  uint64_t seed = static_cast<uint64_t>(ctx.spec.seed);
  for (const Phase& p : s_->phases) {
    s_->phase_samplers.emplace_back();
    if (!p.data) continue;
    DPFT_CHECK_AS(InputError, p.data->size() > 0, "training phase '{}': its data set is empty",
                  p.name);
    s_->phase_samplers.back() = std::make_unique<ShuffleSampler>(
        p.data->size(), p.batch_size, derive_seed(seed, "sampler-" + p.name));
  }
  int64_t n = in.train.size();
  DPFT_CHECK_AS(InputError, n > 0, "the training set has no usable examples ({})",
                ctx.spec.data.train.path);
  const bool by_unit = in.units.kind != privacy::PrivacyUnit::kExample;
  DPFT_CHECK_AS(ConfigError, !by_unit || s_->opts.sampling == Sampling::kPoisson,
                "privacy.unit: {} samples units at rate q: method.sampling must be poisson",
                privacy::name_of(in.units.kind));
  if (s_->opts.sampling == Sampling::kPoisson)  // Poisson over the privacy units
    s_->poisson = ctx.privacy.poisson(in.units.count(n), s_->opts.q, "sampler");
  else
    s_->shuffle =
        std::make_unique<ShuffleSampler>(n, s_->opts.batch_size, derive_seed(seed, "sampler"));
  torch::manual_seed(derive_seed(seed, "dropout"));
}

Trainer::~Trainer() = default;

std::vector<Tensor> Trainer::params() const {
  return s_->params;
}

nlohmann::json Trainer::evaluate(const std::string& tag, int64_t step, bool per_sample) {
  if (s_->in.eval.size() == 0 || !dist::is_root()) return nullptr;  // rank 0 evaluates
  auto t0 = std::chrono::steady_clock::now();
  const Spec& spec = s_->ctx.spec;
  // Base and final of a language model with labelled eval text: classification by label
  // likelihood too. (A classifier's eval, data.task classification, is r's own classification.)
  const EvalBlock b = eval_block(s_->in, 2 * spec.train.micro_batch_size, spec.eval.max_samples,
                                 spec.data.max_length, per_sample);
  const eval::LmEvalResult& r = b.result;
  if (per_sample && spec.eval.per_sample)
    eval::append_per_sample(s_->ctx.dir.file("per_sample.jsonl"), tag, r);
  nlohmann::json j = b.block;
  j["step"] = step;
  nlohmann::json stats = {{"loss", r.loss}, {"accuracy", r.accuracy}};
  for (const auto& [name, ds] : s_->in.eval_sets) {  // data.eval_sets: the same, per named set
    eval::LmEvalResult e = eval::evaluate_lm(s_->in.model, ds, 2 * spec.train.micro_batch_size,
                                             spec.eval.max_samples, s_->in.pad_id);
    if (per_sample && spec.eval.per_sample)
      eval::append_per_sample(s_->ctx.dir.file("per_sample.jsonl"), tag + "/" + name, e);
    j["sets"][name] = e.to_json();
    j["sets"][name].erase("seconds");
    stats["sets"][name] = {{"loss", e.loss}, {"accuracy", e.accuracy}};
    spdlog::info("eval {} (step {}) {}: loss {:.4f}, accuracy {:.4f}", tag, step, name, e.loss,
                 e.accuracy);
  }
  nlohmann::json ev = {{"model", tag}, {"step", step}};
  if (s_->in.eval_overlap > 0)
    ev[kNonPrivate] = stats;  // the eval set holds training examples
  else
    ev.update(stats);
  s_->ctx.dir.event("eval", ev);
  if (r.classification.is_object())  // a classifier: perplexity would mean nothing
    spdlog::info("eval {} (step {}): loss {:.4f}, accuracy {:.4f}, macro-F1 {:.4f}, MCC {:.4f}",
                 tag, step, r.loss, r.accuracy, r.classification.value("macro_f1", 0.0),
                 r.classification.value("mcc", 0.0));
  else
    spdlog::info("eval {} (step {}): loss {:.4f}, accuracy {:.4f}, perplexity {:.2f}", tag, step,
                 r.loss, r.accuracy, r.perplexity);
  s_->eval_seconds += seconds_since(t0);
  return j;
}

nlohmann::json Trainer::evaluate_nlg(int64_t step) {
  if (!dist::is_root() || s_->in.nlg_segments.empty() || !s_->in.tok) return nullptr;
  const NlgEvalSpec& g = s_->ctx.spec.eval.nlg;
  eval::NlgEvalOptions o;
  o.beam.num_beams = g.num_beams;
  o.beam.length_penalty = g.length_penalty;
  o.beam.no_repeat_ngram_size = g.no_repeat_ngram_size;
  o.beam.max_new_tokens = g.max_new_tokens;
  o.batch = g.batch;
  o.max_sources = g.max_sources;
  const int64_t total =
      g.max_sources > 0
          ? std::min<int64_t>(g.max_sources, static_cast<int64_t>(s_->in.nlg_segments.size()))
          : static_cast<int64_t>(s_->in.nlg_segments.size());
  Progress bar(fmt::format("decode (step {})", step), total);
  o.on_batch = [&](int64_t done, int64_t) { bar.update(done); };
  const bool was_training = s_->in.model->is_training();
  eval::NlgEvalResult r = eval::evaluate_nlg(*s_->in.model, *s_->in.tok, s_->in.nlg_segments, o);
  if (was_training) s_->in.model->train();
  bar.finish();
  // The outputs are post-processing of the model; the references and sources are data.eval's.
  fs::path gen = s_->ctx.dir.file(fmt::format("generations/step-{}.jsonl", step));
  fs::create_directories(gen.parent_path());
  write_file_atomic(gen, r.generations_jsonl());
  nlohmann::json j = r.to_json();
  j["step"] = step;
  nlohmann::json ev = {{"model", "step"}, {"step", step}};
  nlohmann::json scores = j;
  scores.erase("step");
  if (s_->in.eval_overlap > 0)
    ev[kNonPrivate] = {{"nlg", scores}};
  else
    ev["nlg"] = scores;
  s_->ctx.dir.event("eval_nlg", ev);
  spdlog::info(
      "eval nlg (step {}): BLEU {:.4f} NIST {:.4f} METEOR {:.4f} ROUGE-L {:.4f} "
      "CIDEr {:.4f} ({} sources, {:.0f} s)",
      step, r.scores.bleu, r.scores.nist, r.scores.meteor, r.scores.rouge_l, r.scores.cider,
      r.scores.segments, r.seconds);
  s_->eval_seconds += r.seconds;
  return j;
}

void Trainer::save_checkpoint() {
  State& s = *s_;
  if (!dist::is_root()) return;  // rank 0 writes the run directory
  fs::path dir = s.ckpt_dir(), tmp = dir.string() + ".tmp", old = dir.string() + ".old";
  remove_tree(tmp);
  fs::create_directories(tmp);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t i = 0; i < s.params.size(); ++i)  // float32 masters (mixed precision: the params
    tensors.emplace_back("param." + s.names[i], s.opt->masters()[i].detach());  // are rounded)
  for (auto& [k, v] : s.opt->state()) tensors.emplace_back("opt." + k, v);
  tensors.emplace_back("rng.torch_cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (const torch::Device dev = s.params.front().device(); dev.is_cuda())  // LoRA dropout there
    tensors.emplace_back("rng.torch_cuda", at::globalContext().defaultGenerator(dev).get_state());
  model::save_safetensors(tmp / "state.safetensors", tensors);
  nlohmann::json j = {{"step", s.step},
                      {"sampler", s.poisson ? s.poisson->state() : s.shuffle->state()},
                      {"noise", s.noise ? s.noise->state() : ""},
                      {"ledger", s.ctx.privacy.ledger().to_json()},
                      {"history", s.history},
                      {"eval_history", s.eval_history},
                      {"nlg_history", s.nlg_history},
                      {"eval_base", s.eval_base},
                      {"eval_prepared", s.eval_prepared},
                      {"step_seconds", s.step_seconds},
                      {"grad_seconds", s.grad_seconds},
                      {"eval_seconds", s.eval_seconds}};
  for (size_t p = 0; p < s.phases.size(); ++p)
    if (s.phase_samplers[p]) j["phase_samplers"][s.phases[p].name] = s.phase_samplers[p]->state();
  if (s.opts.save_state) j["method_state"] = s.opts.save_state();
  // The run's privacy lock and a hash binding it to this ledger and step (restore checks both).
  j["privacy_lock"] = s.ctx.privacy_lock;
  j["integrity"] = checkpoint_integrity(s.ctx.privacy_lock, j["ledger"], s.step);
  write_file_atomic(tmp / "state.json", j.dump(1));
  remove_tree(old);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  remove_tree(old);
  s.ctx.dir.event("checkpoint", {{"step", s.step}});
}

bool Trainer::load_checkpoint() {
  State& s = *s_;
  fs::path dir = s.ckpt_dir();
  if (!fs::exists(dir / "state.json") && fs::exists(dir.string() + ".old"))
    dir = dir.string() + ".old";
  if (!fs::exists(dir / "state.json")) return false;
  try {
    return restore(dir);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(
        fmt::format("checkpoint {} is damaged ({}); the run cannot be resumed from it (training again from step "
            "0 would spend the budget twice): start a new run",
                    dir.string(), e.what()));
  }
}

bool Trainer::restore(const fs::path& dir) {
  State& s = *s_;
  nlohmann::json j = nlohmann::json::parse(read_file(dir / "state.json"));
  verify_checkpoint(j, dir);
  auto st = model::SafetensorsFile::open(dir / "state.safetensors");
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < s.params.size(); ++i) {
      Tensor t = st->load("param." + s.names[i]);
      DPFT_CHECK_AS(InputError, t.sizes() == s.params[i].sizes(),
                    "checkpoint: parameter {} has shape {}, model {}", s.names[i],
                    shape_str(t.sizes()), shape_str(s.params[i].sizes()));
      DPFT_CHECK_AS(InputError, torch::isfinite(t).all().item<bool>(),
                    "checkpoint {}: parameter {} has NaN or infinite values; the checkpoint is "
                    "damaged (remove the run and start a new one)",
                    dir.string(), s.names[i]);
      s.opt->masters()[i].copy_(t);
    }
    s.opt->masters_to_params();
  }
  std::vector<std::pair<std::string, Tensor>> opt_state;
  for (const auto& info : st->tensors())
    if (info.name.rfind("opt.", 0) == 0)
      opt_state.emplace_back(info.name.substr(4), st->load(info.name));
  s.opt->load_state(opt_state);
  {
    at::Generator g = at::detail::getDefaultCPUGenerator();
    g.set_state(st->load("rng.torch_cpu"));
    const torch::Device dev = s.params.front().device();
    if (dev.is_cuda() && st->find("rng.torch_cuda") != nullptr) {
      at::Generator cuda_gen = at::globalContext().defaultGenerator(dev);  // a handle
      cuda_gen.set_state(st->load("rng.torch_cuda"));
    } else if (dev.is_cuda())  // written on the CPU: dropout masks continue from a fresh stream
      spdlog::warn(
          "checkpoint {} was written on the CPU; LoRA dropout on {} continues from its "
          "seeded generator, so the run will not repeat a CPU run's masks",
          dir.string(), dev.str());
  }
  s.step = j.at("step").get<int64_t>();
  if (s.poisson)
    s.poisson->set_state(j.at("sampler").get<std::string>());
  else
    s.shuffle->set_state(j.at("sampler").get<std::string>());
  for (size_t p = 0; p < s.phases.size(); ++p)
    if (s.phase_samplers[p])
      s.phase_samplers[p]->set_state(
          j.at("phase_samplers").at(s.phases[p].name).get<std::string>());
  if (s.noise) s.noise->set_state(j.at("noise").get<std::string>());
  s.ctx.privacy.restore_ledger(j.at("ledger"));
  s.history = j.at("history");
  s.eval_history = j.at("eval_history");
  if (j.contains("nlg_history")) s.nlg_history = j.at("nlg_history");
  s.eval_base = j.at("eval_base");
  s.eval_prepared = j.value("eval_prepared", nlohmann::json());  // absent in older checkpoints
  s.step_seconds = j.at("step_seconds").get<std::vector<double>>();
  s.grad_seconds = j.at("grad_seconds").get<double>();
  s.eval_seconds = j.at("eval_seconds").get<double>();
  if (s.opts.load_state) s.opts.load_state(j.at("method_state"));
  spdlog::info("resumed from {} at step {}", dir.string(), s.step);
  s.ctx.dir.event("resume", {{"step", s.step}});
  return true;
}

void Trainer::check_finite(const BatchStats& st, int64_t step) const {
  const State& s = *s_;
  auto diverged = [&](const std::string& cause) {
    throw RuntimeError(fmt::format(
        "training diverged at step {} of {}: {}; lower train.lr (now {}), or check the model's "
        "weights and the data",
        step, s.total_steps(), cause, s.phases[s.phase_of(step - 1)].schedule.lr));
  };
  if (st.batch_size > 0 && st.dropped >= st.batch_size)
    diverged(fmt::format("every example of the batch (|B| = {}) had a non-finite gradient",
                         st.batch_size));
  if (!std::isfinite(st.loss)) diverged(fmt::format("the training loss is {}", st.loss));
  torch::NoGradGuard ng;
  for (size_t i = 0; i < s.params.size(); ++i)
    if (!torch::isfinite(s.opt->masters()[i]).all().item<bool>())
      diverged(fmt::format("parameter {} has non-finite values after the update", s.names[i]));
}

void Trainer::verify_checkpoint(const nlohmann::json& j, const fs::path& dir) const {
  const State& s = *s_;
  const int64_t step = verify_checkpoint_lock(j, s.ctx.privacy_lock, dir.string());
  auto refuse = [&](const std::string& why) {
    throw InputError(fmt::format(
        "--resume: refused: checkpoint {} {}; resuming from it could misstate what the run "
        "spent. Start a new run (dpft run SPEC)",
        dir.string(), why));
  };
  // One release per step: the ledger must have recorded exactly one per step of each phase.
  for (size_t p = 0; p < s.phases.size(); ++p) {
    const auto& rel = s.phases[p].release;
    if (!rel || rel->noise_multiplier <= 0) continue;
    const int64_t want = std::clamp<int64_t>(step - s.phase_start[p], 0, s.phases[p].steps);
    int64_t recorded = 0;
    for (const auto& r : j.at("ledger").at("releases"))
      if (r.value("label", "") == rel->label) recorded += r.value("count", int64_t{0});
    if (recorded != want)
      refuse(fmt::format("records {} '{}' releases for {} steps", recorded, rel->label, want));
  }
}

bool Trainer::sync_from_root(bool resumed) {
  if (!dist::active()) return resumed;
  State& s = *s_;
  const bool root = dist::is_root();
  std::vector<std::pair<std::string, Tensor>> opt_state;
  nlohmann::json head;
  if (root) {
    opt_state = s.opt->state();
    head = {{"resumed", resumed},
            {"step", s.step},
            {"method_state", s.opts.save_state ? s.opts.save_state() : nlohmann::json()},
            {"opt", nlohmann::json::array()}};
    for (const auto& [name, t] : opt_state)
      head["opt"].push_back({name, t.sizes().vec(), static_cast<int>(t.scalar_type())});
  }
  head = nlohmann::json::parse(dist::broadcast_string(head.dump(), "the state broadcast"));
  if (!root) {
    for (const auto& e : head.at("opt"))
      opt_state.emplace_back(e.at(0).get<std::string>(),
                             torch::zeros(e.at(1).get<std::vector<int64_t>>(),
                                          static_cast<torch::ScalarType>(e.at(2).get<int>())));
  }
  std::vector<Tensor> opt_tensors;
  for (auto& kv : opt_state) opt_tensors.push_back(kv.second);
  dist::broadcast(opt_tensors, "the optimizer state broadcast");
  std::vector<Tensor> masters = s.opt->masters();  // handles: written in place
  dist::broadcast(masters, "the parameter broadcast");
  if (!root) {
    s.opt->masters_to_params();
    s.opt->load_state(opt_state);
    s.step = head.at("step").get<int64_t>();
    if (s.opts.load_state && !head.at("method_state").is_null())
      s.opts.load_state(head.at("method_state"));
  }
  return head.at("resumed").get<bool>();
}

nlohmann::json Trainer::run(const GradientFn& gradient) {
  State& s = *s_;
  const Spec& spec = s.ctx.spec;
  const int64_t T = s.total_steps();
  // Data parallel: rank 0 reads the checkpoint, prepares (before_training) and evaluates; the
  // other ranks receive its state in sync_from_root().
  const bool root = dist::is_root();
  if (dist::active()) {  // the same model weights and tokenised data on every rank
    torch::NoGradGuard ng;
    double sum = 0, sq = 0;
    for (const auto& p : s.in.model->parameters()) {
      const Tensor d = p.detach().to(torch::kFloat64);
      sum += d.sum().item<double>();
      sq += d.pow(2).sum().item<double>();
    }
    dist::agree(fmt::format("{:.17g} {:.17g} {} {} {}", sum, sq, s.in.train.size(),
                            s.in.train.num_tokens(), s.in.eval.size()),
                "the model and data check",
                "loaded other model weights or tokenised the data differently than rank 0 "
                "(another model or tokenizer snapshot on some node?)");
  }
  bool resumed = s.ctx.resume && root && load_checkpoint();
  if (s.ctx.resume && !resumed && root) {
    // Training again from step 0 would release a second model trained on the same private data
    // (with fresh noise under secure_noise) while the ledger counts one training.
    const int64_t done = s.ctx.dir.count_events("step");
    if (done > 0)
      throw InputError(fmt::format(
          "--resume {}: refused: the run recorded {} training steps but has no checkpoint to "
          "continue from (output.checkpoint_every: 0, or it finished); training again from "
          "step 0 would spend its budget twice. Start a new run",
          s.ctx.dir.path().string(), done));
    spdlog::warn("no checkpoint in {}; starting from step 0 (nothing was trained yet)",
                 s.ckpt_dir().string());
  }
  if (!resumed) {
    s.eval_base = evaluate("base", 0, true);
    if (s.opts.before_training && root) {
      s.opts.before_training();
      s.opt->params_to_masters();  // it may have trained the model (PE-SGD's synthetic SFT)
    }
    if (!s.opts.eval_after_prepare.empty())
      s.eval_prepared = evaluate(s.opts.eval_after_prepare, 0, false);
  }
  resumed = sync_from_root(resumed);
  Progress progress("train", T);
  progress.start_at(s.step);
  const int64_t first = s.step;
  const uint64_t dropout_seed = derive_seed(static_cast<uint64_t>(spec.seed), "dropout");
  while (s.step < T) {
    // Rank 0 decides whether to go on and draws the logical batch; every rank gets both.
    enum : int64_t { kGo = 0, kInterrupted = 1, kStopAfter = 2 };
    int64_t decision = interrupted()                                                  ? kInterrupted
                       : (s.ctx.stop_after > 0 && s.step - first >= s.ctx.stop_after) ? kStopAfter
                                                                                      : kGo;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int64_t> rows;
    const size_t ph = s.phase_of(s.step);
    if (root && decision == kGo)
      rows = s.phase_samplers[ph] ? s.phase_samplers[ph]->next()
             : s.poisson          ? s.poisson->next()
                                  : s.shuffle->next();
    if (dist::active()) {
      rows.push_back(decision);  // one broadcast: the rows, then the decision
      rows = dist::broadcast_rows(rows, "the batch broadcast");
      decision = rows.back();
      rows.pop_back();
      // LoRA dropout masks: a stream per (step, rank), so any world size resumes exactly.
      torch::manual_seed(derive_seed(dropout_seed + static_cast<uint64_t>(s.step),
                                     "rank" + std::to_string(dist::rank())));
    }
    if (decision == kStopAfter) s.ctx.stopped = true;
    if (decision != kGo) break;
    const Phase& phase = s.phases[ph];
    if (s.step == s.phase_start[ph] && s.started < static_cast<int64_t>(ph)) {
      if (ph > 0) s.opt->reset_state();
      if (phase.on_start) phase.on_start();
    }
    s.started = static_cast<int64_t>(ph);
    BatchStats st;
    st.step = s.step;
    if (!s.in.units.rows.empty() && !phase.data) rows = unit_rows(s.in.units, rows, st.unit_starts);
    const int64_t released = phase.release ? s.ctx.privacy.recorded(*phase.release) : 0;
    std::vector<Tensor> grads = gradient(rows, st);
    // The step's release went through the method's mechanism (core/privacy/mechanism.hpp),
    // which recorded it: exactly one per step of a releasing phase.
    if (phase.release)
      DPFT_CHECK(s.ctx.privacy.recorded(*phase.release) == released + 1,
                 "step {} of phase '{}' made {} releases '{}', not 1 (a bug in the method)",
                 s.step + 1, phase.name, s.ctx.privacy.recorded(*phase.release) - released,
                 phase.release->label);
    check_step_gradients(grads, s.opt->masters(), s.names);
    double lr = lr_at(phase.schedule, s.step - s.phase_start[ph]);
    s.opt->step(grads, lr);
    check_finite(st, s.step + 1);
    ++s.step;
    if (s.opts.after_step) s.opts.after_step(s.step);
    double secs = seconds_since(t0);
    s.step_seconds.push_back(secs);
    s.grad_seconds += st.grad_seconds;
    // The step number and the learning rate are public; everything else measured on the batch
    // (its loss and realised size, gradient norms, the step's duration) is a non-private
    // statistic of the private data: written only under output.non_private_stats.
    nlohmann::json ev = {{"step", s.step}, {"lr", lr}};
    if (spec.output.non_private_stats) {
      nlohmann::json h = {{"step", s.step},
                          {"loss", st.loss},
                          {"batch_size", st.batch_size},
                          {"lr", lr},
                          {"grad_norm_mean", st.grad_norm_mean},
                          {"clipped_fraction", st.clipped_fraction}};
      if (st.extra.is_object()) h.update(st.extra);
      s.history.push_back(h);
      nlohmann::json np = h;
      np.erase("step");
      np.erase("lr");
      np["seconds"] = secs;
      ev[kNonPrivate] = np;
      s.ctx.dir.event("step", ev);
      progress.update(s.step, fmt::format("loss {:.4f} |B| {}", st.loss, st.batch_size));
    } else {
      s.ctx.dir.event("step", ev);
      progress.update(s.step);
    }
    if (spec.eval.every > 0 && s.step % spec.eval.every == 0 && s.step < T)
      s.eval_history.push_back(evaluate("step", s.step, false));
    const auto& nlg_at = spec.eval.nlg.at_steps;
    if (std::binary_search(nlg_at.begin(), nlg_at.end(), s.step))
      s.nlg_history.push_back(evaluate_nlg(s.step));
    if (spec.output.checkpoint_every > 0 && s.step % spec.output.checkpoint_every == 0 &&
        s.step < T)
      save_checkpoint();
    fault_point(("step" + std::to_string(s.step)).c_str());
  }
  progress.finish();
  nlohmann::json out;
  if (s.step < T) {  // interrupted: keep everything needed to resume
    save_checkpoint();
    // The runner's one line says why it stopped and how to continue.
    spdlog::debug("stopped at step {} of {}; checkpoint saved", s.step, T);
  } else {
    // Training is done: checkpoint step T first, so that a signal during the final evaluation
    // or the save leaves a run that --resume finishes (evaluate, save) without training again.
    if (!(resumed && first == T)) save_checkpoint();
    fault_point("final_eval");
    s.eval_final = evaluate("final", s.step, true);
    if (spec.output.save_model && root) {
      const torch::Dtype dt = torch_dtype(spec.output.save_dtype);
      if (model::saves_adapter(s.in.peft.kind)) {
        model::save_adapter(s.in.model, s.in.peft, s.ctx.dir.file("adapter"),
                            s.in.model_dir.string());
        write_provenance(s.ctx.dir.file("adapter"), s.ctx);  // the run's releases, its data
      } else {
        model::save_checkpoint(s.in.model, s.ctx.dir.file("model"), false, dt);
        model::copy_tokenizer_files(s.in.tokenizer_dir, s.ctx.dir.file("model"));
        write_provenance(s.ctx.dir.file("model"), s.ctx);
      }
    }
    fault_point("saved");
    if (s.opts.after_training && root) out[s.opts.after_training_key] = s.opts.after_training();
    const std::string& key = s.opts.after_training_key;
    if (out.contains(key) && out[key].is_object() && out[key].value("interrupted", false)) {
      // A signal stopped the after-training work (CTCL's synthesis): the resume continues it.
      spdlog::warn("interrupted after training; the checkpoint is kept: dpft run --resume {}",
                   s.ctx.dir.path().string());
    } else {
      if (root) remove_tree(s.ckpt_dir());
      s.ctx.finished = true;
    }
  }
  double train_s = 0;
  for (double x : s.step_seconds) train_s += x;
  out["train"] = {{"steps_done", s.step},
                  {"steps", T},
                  {"optimizer", name_of(spec.train.optimizer)},
                  {"lr", spec.train.lr},
                  {"schedule", name_of(spec.train.schedule)},
                  {"sampling", enum_name(s.opts.sampling, kSamplingNames)},
                  {"dataset_size", s.in.train.size()},
                  {"eval_size", s.in.eval.size()},
                  {"trainable_parameters", model::count_parameters(s.in.model, true)},
                  {"method", s.opts.method_info}};
  if (s.phases.size() > 1) {
    out["train"]["phases"] = nlohmann::json::array();
    for (size_t p = 0; p < s.phases.size(); ++p)
      out["train"]["phases"].push_back({{"name", s.phases[p].name},
                                        {"first_step", s.phase_start[p] + 1},
                                        {"steps", s.phases[p].steps},
                                        {"lr", s.phases[p].schedule.lr},
                                        {"warmup_ratio", s.phases[p].schedule.warmup_ratio},
                                        {"schedule", name_of(s.phases[p].schedule.kind)}});
  }
  out["eval"] = {{"base", s.eval_base}, {"final", s.eval_final}, {"history", s.eval_history}};
  if (!spec.eval.nlg.at_steps.empty() && root) out["eval"]["nlg"] = s.nlg_history;
  if (spec.eval.reference_accuracy > 0 && !s.eval_base.is_null())
    out["eval"]["steps_to_accuracy"] =
        steps_to_accuracy(s.eval_base, s.eval_history, s.eval_final, spec.eval.reference_accuracy);
  if (!s.opts.eval_after_prepare.empty()) out["eval"][s.opts.eval_after_prepare] = s.eval_prepared;
  if (spec.output.non_private_stats)
    out[kNonPrivate] = {
        {"note", kNonPrivateNote},
        {"history", s.history},
        {"timing",
         {{"train_s", train_s},
          {"median_step_s", median(s.step_seconds)},
          {"per_sample_grad_s", s.grad_seconds},
          {"per_sample_grad_share", train_s > 0 ? s.grad_seconds / train_s : 0.0},
          {"eval_s", s.eval_seconds}}}};
  if (s.in.eval_overlap > 0) {  // evaluated on training examples: not post-processing of DP
    out[kNonPrivate]["eval"] = out["eval"];
    out[kNonPrivate]["eval"]["overlap_with_train"] = s.in.eval_overlap;
    out["eval"] = nullptr;
  }
  const eval::EvalVerdict verdict =
      eval::eval_verdict(s.eval_base, s.eval_final, spec.data.task == Task::kClassification);
  if (!verdict.line.empty()) spdlog::info("{}", verdict.line);
  for (const std::string& w : verdict.warnings) spdlog::warn("{}", w);
  return out;
}

nlohmann::json steps_to_accuracy(const nlohmann::json& base, const nlohmann::json& history,
                                 const nlohmann::json& final_eval, double reference) {
  std::vector<const nlohmann::json*> evals = {&base};
  for (const auto& h : history) evals.push_back(&h);
  evals.push_back(&final_eval);
  auto accuracy = [](const nlohmann::json& e) -> std::optional<double> {
    if (!e.is_object()) return std::nullopt;
    if (e.contains("classification") && e["classification"].contains("accuracy"))
      return e["classification"]["accuracy"].get<double>();
    if (e.contains("accuracy") && e["accuracy"].is_number()) return e["accuracy"].get<double>();
    return std::nullopt;
  };
  nlohmann::json out = {{"reference", reference}};
  for (double f : {0.9, 0.95}) {
    const double target = f * reference;
    nlohmann::json step = nullptr;
    for (const nlohmann::json* e : evals) {
      auto a = accuracy(*e);
      if (a && *a >= target && e->contains("step")) {
        step = (*e)["step"];
        break;
      }
    }
    out[f == 0.9 ? "0.9" : "0.95"] = {{"target", target}, {"step", step}};
  }
  return out;
}

}  // namespace dpft::train
