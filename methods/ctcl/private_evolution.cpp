// Methods `pe` and `aug-pe`: DP synthetic text by Private Evolution, the API-only baselines of
// the CTCL paper (paper 004, Tables 3-4: "Aug-PE", "PE"). The private data are never trained on:
// they only vote, through one DP nearest-neighbour histogram per iteration, for which of the
// generator's candidates survive.
//
// Aug-PE (Xie et al. 2024, Alg. 1) and PE (Lin et al. 2024, Alg. 1), as the DPSDA library
// runs them (PE runner + PE population), for each class l of the private set (one class when
// unlabelled) with n_l = its share of N_syn:
//   0      P_0 = RANDOM_API(n_l), plus `initial_variations` VARIATION_API copies of each
//   t = 1..T
//     1    embed the candidates P_{t-1} (the private texts are embedded once)
//     2    each private text of class l votes 1/sqrt(k) for its k nearest candidates of class l
//          (core/topics knn: faiss exact L2 search on unit embeddings); privacy.unit user:
//          a user's votes over all classes summed and scaled to L2 norm at most 1
//     3    one Gaussian release of all classes' votes together, sigma: L2 sensitivity 1
//          (core/privacy/mechanism.hpp VoteHistogram), in the ledger
//     4    h <- max(h - threshold, 0); select n_l: rank (Aug-PE) or sample ∝ h (PE)
//     5    P_t = `variations` VARIATION_API copies of each selected (+ the selected with
//          keep_selected): skipped after the last iteration with output: selected
//   out    S_T: the last selection (output: selected, Aug-PE's default) or P_T (PE's)
// sigma: privacy.noise_multiplier, or calibrated by the run's accountant so the T releases (q 1)
// and, with labels: dp, the class histogram compose to privacy.epsilon. (DPSDA calibrates with
// the closed form of T composed Gaussians, mu = sqrt(T) / sigma (Dong et al. 2019); the tests
// check the PRV accountant against it.)
// Class shares: uniform over the classes the spec lists (public), or by a DP class histogram
// (labels: dp, one Gaussian release of sensitivity 1, as CTCL's topic histogram). DPSDA's
// default takes the private class frequencies as public; dpft does not.
// Not implemented: Aug-PE's lookahead embeddings (the mean embedding of d variations; 0 in the
// library's default) and its adaptive text length.
//
// A checkpoint (<run>/pe_state.json: populations, the ledger, the noise stream, with the run's
// privacy lock and an integrity hash) is written after every iteration; --resume continues from
// it and repeats an uninterrupted run.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "core/config/fields.hpp"
#include "core/config/ledger_options.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/eval/embed.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/privacy/histogram.hpp"
#include "core/run/privacy_lock.hpp"
#include "core/run/provenance.hpp"
#include "core/synth/synthetic.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/progress.hpp"
#include "core/util/seed.hpp"
#include "core/util/signals.hpp"
#include "core/util/strings.hpp"
#include "data/lm_dataset.hpp"
#include "data/table.hpp"
#include "methods/ctcl/pe_population.hpp"
#include "methods/ctcl/synthesis.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

constexpr auto kReplaceInvalid = nlohmann::json::error_handler_t::replace;
constexpr const char* kStateSchema = "dpft.pe_state/1";
constexpr const char* kVotesLabel = "pe_histogram";
constexpr const char* kClassLabel = "class_histogram";

enum class ClassShares { kUniform, kDp };
constexpr std::array<EnumName<ClassShares>, 2> kClassShareNames = {
    {{ClassShares::kUniform, "uniform"}, {ClassShares::kDp, "dp"}}};
enum class PeOutput { kSelected, kPopulation };
constexpr std::array<EnumName<PeOutput>, 2> kPeOutputNames = {
    {{PeOutput::kSelected, "selected"}, {PeOutput::kPopulation, "population"}}};

struct PeGeneration {
  synth::PromptStyle style =
      synth::PromptStyle::kAuto;  // auto (chat when data.chat_format is not none) | plain | chat
  int64_t max_new_tokens = 128, min_new_tokens = 0, top_k = 0, batch = 32;
  double temperature = 1.0, top_p = 1.0, repetition_penalty = 1.0;
};

class PrivateEvolution : public MethodOf<PrivateEvolution> {
 public:
  // privacy.unit user (or document): one vote vector of L2 norm at most 1 per unit
  // (privacy::nn_votes), the class histogram one bin per unit (privacy::unit_bins)
  bool honours_unit(privacy::PrivacyUnit) const override { return true; }
  explicit PrivateEvolution(bool augmented) : aug_(augmented) {
    if (aug_) {  // Aug-PE: variations before the vote, rank selection, the selected kept
      variations_ = 3;
      initial_variations_ = 3;
      keep_selected_ = true;
      selection_ = pe::Selection::kRank;
      output_ = PeOutput::kSelected;
    }
  }
  std::string name() const override { return aug_ ? "aug-pe" : "pe"; }
  std::string label() const override { return aug_ ? "Aug-PE" : "PE"; }

  void configure(Fields& f) override {
    f.get("embedder", embedder_);                            // encoder for the sentence embeddings
    f.get("embed_batch", embed_batch_, Range::at_least(1));  // texts per encoder forward
    // tokens per text (0: the encoder's positions)
    f.get("embed_max_length", embed_max_length_, Range::at_least(0));
    f.get("prompts", prompts_);                            // RANDOM_API / VARIATION_API prompt file
    f.get("iterations", iterations_, Range::at_least(1));  // T: DP histograms
    f.get("num_synthetic", num_synthetic_, Range::closed(1, 1e7));  // N_syn: selected each time
    f.get("variations", variations_, Range::at_least(0));  // VARIATION_API copies of a selected
    f.get("initial_variations", initial_variations_, Range::at_least(0));  // ... of an initial
    f.get("keep_selected", keep_selected_);  // the selected stay in the next population
    f.get_enum("selection", selection_, pe::kSelectionNames);
    f.get("threshold", threshold_, Range::at_least(0));  // H: subtracted, clamped at 0
    f.get("nearest_neighbors", k_, Range::at_least(1));  // k: candidates each text votes for
    f.get_enum("output", output_, kPeOutputNames);
    labels_.read(f, name());
    f.get_enum("class_shares", shares_, kClassShareNames);
    f.get("class_hist_sigma", class_hist_sigma_, Range::above(0));  // class_shares dp: its sigma
    f.get("save_iterations", save_iterations_);  // synthetic/iter_XXXX.jsonl per iteration
    Fields g = f.child("generation");
    g.get_enum("style", gen_.style, synth::kPromptStyleNames);
    g.get("max_new_tokens", gen_.max_new_tokens, Range::at_least(1));
    g.get("min_new_tokens", gen_.min_new_tokens, Range::at_least(0));
    g.get("temperature", gen_.temperature, Range::above(0));
    g.get("top_p", gen_.top_p, Range{0, 1, true, false});
    g.get("top_k", gen_.top_k, Range::at_least(0));
    g.get("repetition_penalty", gen_.repetition_penalty, Range::at_least(1));
    g.get("batch", gen_.batch, Range::at_least(1));
    g.finish();
    const std::string m = "method " + name();
    DPFT_CHECK_AS(ConfigError, !embedder_.empty(),
                  "{}: method.embedder is required (an encoder checkpoint for the sentence "
                  "embeddings the private texts vote with, e.g. models/tiny-roberta)",
                  m);
    DPFT_CHECK_AS(ConfigError, !prompts_.empty(),
                  "{}: method.prompts is required (a prompt file: experiments/prompts/*.yaml)", m);
    DPFT_CHECK_AS(ConfigError, variations_ > 0 || keep_selected_,
                  "{}: variations 0 without keep_selected leaves the next population empty", m);
    // Every class with seats holds >= n_l * min(1 + initial_variations, variations +
    // keep_selected) >= that many candidates: enough for k neighbours.
    const int64_t smallest =
        std::min<int64_t>(1 + initial_variations_, variations_ + (keep_selected_ ? 1 : 0));
    DPFT_CHECK_AS(ConfigError, k_ <= smallest,
                  "{}: nearest_neighbors {} exceeds the {} candidates a class of one seat may "
                  "hold; lower it or raise variations / initial_variations",
                  m, k_, smallest);
  }

  // T vote releases at sigma (q 1) and, with class_shares dp over several classes, the class
  // histogram; sigma calibrated with the latter composed in.
  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override {
    const PrivacySpec& p = spec.privacy;
    DPFT_CHECK_AS(InputError, n >= 1, "method {}: the private set is empty", name());
    class_sigma_ = class_release() && p.is_private() ? class_hist_sigma_ : 0.0;
    std::vector<privacy::GaussianBlock> fixed;
    if (class_sigma_ > 0) fixed.push_back({class_sigma_, 1.0, 1});
    const train::NoiseChoice c = train::choose_noise(
        p, name(), "DP histograms", inherited.releases,
        [&](privacy::Accountant& acc, double eps, double delta) {
          sigma_ = privacy::calibrate_sigma(acc, 1.0, iterations_, eps, delta, 1e-3, fixed).sigma;
        });
    if (!c.calibrated()) sigma_ = c.sigma;
    sigma_source_ = c.source;
    std::vector<privacy::Release> out;
    if (class_release()) out.push_back({kClassLabel, class_sigma_, 1.0, 1});
    out.push_back({kVotesLabel, sigma_, 1.0, iterations_});
    return out;
  }

  nlohmann::json plan_settings() const override {
    nlohmann::json j = {{"sigma", sigma_},
                        {"sigma_source", sigma_source_},
                        {"iterations", iterations_},
                        {"sensitivity", 1.0}};
    if (class_release()) j["class_histogram_sigma"] = class_sigma_;
    return j;
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override;
  // P_0 of an unlabelled run (one class of N_syn seats), as run() generates it.
  std::vector<std::string> public_candidates(const Spec& spec,
                                             train::TrainInputs& in) const override;

 private:
  struct Class {
    std::string label;                // "" when unlabelled; the values joined by "\n"
    std::vector<std::string> values;  // one per label column
    std::vector<int64_t> members;     // private rows (indices into the embedded texts)
    int64_t seats = 0;                // n_l
  };
  struct State {
    int64_t iteration = 0;                                       // histograms released so far
    bool initialised = false;                                    // P_0 generated
    std::vector<std::vector<std::string>> population, selected;  // per class
    std::vector<std::vector<double>> selected_counts;            // noisy counts of the selected
    nlohmann::json history = nlohmann::json::array();
  };

  bool class_release() const {
    return shares_ == ClassShares::kDp && !labels_.columns.empty() && num_classes() > 1;
  }
  int64_t num_classes() const {
    int64_t c = 1;
    for (const auto& v : labels_.values) c *= static_cast<int64_t>(v.size());
    return c;
  }
  std::vector<Class> make_classes(const Spec& spec, const train::TrainInputs& in,
                                  std::vector<std::string>& texts) const;
  void save_state(RunContext& ctx, const State& st, privacy::VoteHistogram& noise,
                  const std::vector<Class>& classes) const;
  bool load_state(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                  std::vector<Class>& classes) const;
  struct Generators {
    std::vector<std::unique_ptr<synth::SyntheticGenerator>> per_class;
    synth::PromptStyle style = synth::PromptStyle::kPlain;
  };
  struct IterationStats {  // of the released counts h, after the threshold
    int64_t candidates = 0, positive = 0, uniform_classes = 0;
    double top = 0, seconds = 0;
  };
  void check_runnable(const Spec& spec, const train::TrainInputs& in) const;
  Generators make_generators(const Spec& spec, train::TrainInputs& in,
                             const std::vector<Class>& classes) const;
  void allocate_seats(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                      std::vector<Class>& classes, size_t n_private,
                      const privacy::Units& units) const;
  std::vector<std::string> vary(synth::SyntheticGenerator& gen,
                                const std::vector<std::string>& from, int64_t copies, uint64_t seed,
                                const std::string& stream) const;
  // Step 0 for class c: RANDOM_API(seats) and initial_variations variations of each.
  std::vector<std::string> initial_population(synth::SyntheticGenerator& gen, int64_t seats,
                                              uint64_t seed, size_t c) const;
  std::vector<double> vote(const State& st, const std::vector<Class>& classes,
                           const torch::Tensor& priv_emb, const torch::Tensor& cand,
                           const std::vector<int64_t>& offset, int64_t M,
                           const std::vector<int64_t>& unit_of_row) const;
  void select_next(State& st, const std::vector<Class>& classes, Generators& gens,
                   const std::vector<double>& noisy, const std::vector<int64_t>& offset, int64_t t,
                   uint64_t seed, IterationStats& s) const;
  void record_iteration(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                        const std::vector<Class>& classes, int64_t t,
                        const IterationStats& s) const;
  nlohmann::json report(const State& st, const std::vector<Class>& classes, const Generators& gens,
                        const nlohmann::json& embedder) const;
  void finish(RunContext& ctx, const State& st, const std::vector<Class>& classes,
              nlohmann::json& out, std::chrono::steady_clock::time_point t_start) const;
  void write_output(RunContext& ctx, const State& st, const std::vector<Class>& classes,
                    const std::string& file, bool with_counts) const;

  bool aug_;
  std::string embedder_, prompts_;
  int64_t embed_batch_ = 32, embed_max_length_ = 0;
  int64_t iterations_ = 10, num_synthetic_ = 100;
  int64_t variations_ = 1, initial_variations_ = 0;
  bool keep_selected_ = false;
  pe::Selection selection_ = pe::Selection::kSample;
  double threshold_ = 0;
  int64_t k_ = 1;
  PeOutput output_ = PeOutput::kPopulation;
  ctcl::LabelOptions labels_;
  ClassShares shares_ = ClassShares::kUniform;
  double class_hist_sigma_ = 10;
  bool save_iterations_ = true;
  PeGeneration gen_;
  double sigma_ = 0, class_sigma_ = 0;
  std::string sigma_source_;
};

std::vector<PrivateEvolution::Class> PrivateEvolution::make_classes(
    const Spec& spec, const train::TrainInputs& in, std::vector<std::string>& texts) const {
  std::unordered_map<int64_t, std::string> text_of;
  for (auto& e : data::read_examples(spec.data.train, "data.train"))
    text_of.emplace(e.index, std::move(e.text));
  std::vector<int64_t> rows;
  for (const auto& it : in.train.items) {
    rows.push_back(it.index);
    texts.push_back(text_of.at(it.index));
  }
  std::vector<Class> classes;
  if (labels_.columns.empty()) {
    Class c;
    for (size_t i = 0; i < rows.size(); ++i) c.members.push_back(static_cast<int64_t>(i));
    classes.push_back(std::move(c));
    return classes;
  }
  // The classes: every combination of the public values (methods/ctcl/synthesis.hpp).
  const ctcl::Classes cl = ctcl::class_combinations(labels_.values);
  for (int64_t c = 0; c < cl.size(); ++c) {
    Class k;
    k.values = cl.values[static_cast<size_t>(c)];
    k.label = cl.label[static_cast<size_t>(c)];
    classes.push_back(std::move(k));
  }
  const std::vector<int64_t> class_of = ctcl::classes_of_rows(
      spec.data.train.path, spec.data.train.format, rows, labels_.columns, cl, "method " + name());
  for (size_t i = 0; i < rows.size(); ++i)
    classes[static_cast<size_t>(class_of[i])].members.push_back(static_cast<int64_t>(i));
  return classes;
}

void PrivateEvolution::save_state(RunContext& ctx, const State& st, privacy::VoteHistogram& noise,
                                  const std::vector<Class>& classes) const {
  const nlohmann::json ledger = ctx.privacy.ledger().to_json();
  std::vector<int64_t> seats;
  for (const auto& c : classes) seats.push_back(c.seats);
  nlohmann::json j = {{"schema", kStateSchema},
                      {"step", st.iteration},
                      {"initialised", st.initialised},
                      {"seats", seats},
                      {"population", st.population},
                      {"selected", st.selected},
                      {"selected_counts", st.selected_counts},
                      {"history", st.history},
                      {"noise", noise.state()},
                      {"ledger", ledger},
                      {"privacy_lock", ctx.privacy_lock},
                      {"integrity", checkpoint_integrity(ctx.privacy_lock, ledger, st.iteration)}};
  write_file_atomic(ctx.dir.file("pe_state.json"), j.dump(-1, ' ', false, kReplaceInvalid));
}

bool PrivateEvolution::load_state(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                                  std::vector<Class>& classes) const {
  const fs::path file = ctx.dir.file("pe_state.json");
  // Iterations were released: without their state the run would release them all again.
  DPFT_CHECK_AS(InputError,
                !ctx.resume || fs::exists(file) || ctx.dir.count_events("pe_iteration") == 0,
                "--resume: refused: {} is missing, but the run already released {} iteration(s) "
                "of votes; restore the file, or start a new run",
                file.string(), ctx.dir.count_events("pe_iteration"));
  if (!ctx.resume || !fs::exists(file)) return false;
  nlohmann::json j;
  try {
    j = read_json(file);
  } catch (const std::exception& e) {
    throw InputError(fmt::format(
        "{} is damaged ({}); the run cannot be resumed from it (starting over would spend the "
        "budget twice): start a new run",
        file.string(), e.what()));
  }
  const int64_t step = verify_checkpoint_lock(j, ctx.privacy_lock, file.string());
  try {
    int64_t recorded = 0;
    for (const auto& r : j.at("ledger").at("releases"))
      if (r.value("label", "") == kVotesLabel) recorded += r.value("count", int64_t{0});
    DPFT_CHECK_AS(InputError, recorded == step,
                  "--resume: refused: checkpoint {} records {} '{}' releases for {} iterations; "
                  "start a new run",
                  file.string(), recorded, kVotesLabel, step);
    const auto seats = j.at("seats").get<std::vector<int64_t>>();
    DPFT_CHECK_AS(InputError, seats.size() == classes.size(),
                  "--resume: checkpoint {} has {} classes, the spec {}", file.string(),
                  seats.size(), classes.size());
    for (size_t c = 0; c < classes.size(); ++c) classes[c].seats = seats[c];
    st.iteration = step;
    st.initialised = j.at("initialised").get<bool>();
    st.population = j.at("population").get<std::vector<std::vector<std::string>>>();
    st.selected = j.at("selected").get<std::vector<std::vector<std::string>>>();
    st.selected_counts = j.at("selected_counts").get<std::vector<std::vector<double>>>();
    st.history = j.at("history");
    noise.set_state(j.at("noise").get<std::string>());
    ctx.privacy.restore_ledger(j.at("ledger"));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{} is damaged ({}); start a new run", file.string(), e.what()));
  }
  spdlog::info("{}: resumed from {} after iteration {} of {}", name(), file.string(), st.iteration,
               iterations_);
  ctx.dir.event("resume", {{"step", st.iteration}});
  return true;
}

void PrivateEvolution::write_output(RunContext& ctx, const State& st,
                                    const std::vector<Class>& classes, const std::string& file,
                                    bool with_counts) const {
  std::string lines;
  const bool selected = with_counts || output_ == PeOutput::kSelected;
  for (size_t c = 0; c < classes.size(); ++c) {
    const auto& texts = selected ? st.selected[c] : st.population[c];
    for (size_t i = 0; i < texts.size(); ++i) {
      nlohmann::json row = {{"text", texts[i]}};
      if (!labels_.columns.empty()) {
        row["label"] = classes[c].label;
        for (size_t j = 0; j < labels_.columns.size(); ++j)
          row[labels_.columns[j]] = classes[c].values[j];
      }
      if (with_counts) row["count"] = st.selected_counts[c][i];
      lines += row.dump(-1, ' ', false, kReplaceInvalid) + "\n";
    }
  }
  fs::create_directories(ctx.dir.file("synthetic"));
  write_file_atomic(ctx.dir.file("synthetic") / file, lines);
  write_provenance(ctx.dir.file("synthetic"), ctx);  // the iterations released so far
}

// The generator: one prompt set per class (the class label in the prompts when labelled).
PrivateEvolution::Generators PrivateEvolution::make_generators(
    const Spec& spec, train::TrainInputs& in, const std::vector<Class>& classes) const {
  const synth::PromptSet prompts = synth::load_prompts(prompts_);
  synth::GeneratorOptions go;
  go.style = synth::resolve_style(gen_.style, spec.data.chat_format != ChatFormatChoice::kNone);
  go.chat_format = data::fixed_chat_format(spec.data.chat_format);
  go.gen.do_sample = true;
  go.gen.max_new_tokens = gen_.max_new_tokens;
  go.gen.min_new_tokens = gen_.min_new_tokens;
  go.gen.temperature = gen_.temperature;
  go.gen.top_p = gen_.top_p;
  go.gen.top_k = gen_.top_k;
  go.gen.repetition_penalty = gen_.repetition_penalty;
  go.batch_size = gen_.batch;
  Generators g;
  g.style = go.style;
  for (const auto& c : classes)
    g.per_class.push_back(std::make_unique<synth::SyntheticGenerator>(
        in.model, *in.tok,
        labels_.columns.empty() ? prompts : synth::with_label(prompts, c.label, prompts_), go));
  torch::NoGradGuard ng;
  in.model->eval();
  return g;
}

// Class shares n_l: public (uniform over the listed classes) or by a DP class histogram; saved
// at once so that the class histogram is never drawn twice.
void PrivateEvolution::allocate_seats(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                                      std::vector<Class>& classes, size_t n_private,
                                      const privacy::Units& units) const {
  std::vector<int64_t> weights(classes.size(), 1);
  if (class_release()) {
    std::vector<int64_t> class_of(n_private);
    for (size_t c = 0; c < classes.size(); ++c)
      for (int64_t i : classes[c].members)
        class_of[static_cast<size_t>(i)] = static_cast<int64_t>(c);
    weights =
        ctx.privacy  // sigma 0: the true counts, recorded as non-private
            .histogram("pe-class-histogram", privacy::Release{kClassLabel, class_sigma_, 1.0, 1})
            .release(class_of, static_cast<int64_t>(classes.size()), units);
  }
  bool uniform = false;
  const std::vector<int64_t> seats = ctcl::apportion(weights, num_synthetic_, &uniform);
  if (uniform && class_release())
    spdlog::warn("method {}: the released class histogram is all zero; seats spread evenly",
                 name());
  for (size_t c = 0; c < classes.size(); ++c) classes[c].seats = seats[c];
  st.population.assign(classes.size(), {});
  st.selected.assign(classes.size(), {});
  st.selected_counts.assign(classes.size(), {});
  save_state(ctx, st, noise, classes);
}

std::vector<std::string> PrivateEvolution::vary(synth::SyntheticGenerator& gen,
                                                const std::vector<std::string>& from,
                                                int64_t copies, uint64_t seed,
                                                const std::string& stream) const {
  if (copies == 0 || from.empty()) return {};
  return gen.variational_api(from, copies, derive_seed(seed, stream));
}

std::vector<std::string> PrivateEvolution::initial_population(synth::SyntheticGenerator& gen,
                                                              int64_t seats, uint64_t seed,
                                                              size_t c) const {
  std::vector<std::string> p =
      gen.random_api(seats, derive_seed(seed, fmt::format("pe-random-{}", c)));
  std::vector<std::string> v =
      vary(gen, p, initial_variations_, seed, fmt::format("pe-vary-0-{}", c));
  p.insert(p.end(), v.begin(), v.end());
  return p;
}

std::vector<std::string> PrivateEvolution::public_candidates(const Spec& spec,
                                                             train::TrainInputs& in) const {
  DPFT_CHECK_AS(ConfigError, labels_.columns.empty(),
                "method {}: the public candidates of a labelled run depend on its class "
                "shares; remove method.label_columns",
                name());
  Class one;
  one.seats = num_synthetic_;
  Generators g = make_generators(spec, in, {one});
  return initial_population(*g.per_class[0], num_synthetic_, static_cast<uint64_t>(spec.seed), 0);
}

// Steps 1-2 for every class: each private text of class l votes 1/sqrt(k) for its k nearest
// candidates of class l; per privacy unit (unit_of_row: each private text's unit, units.hpp),
// a user's votes over all classes together scaled to L2 norm at most 1 (privacy::nn_votes).
// priv_emb: (n, e) unit rows; cand: (M, e), class c's candidates at rows [offset[c], offset[c] +
// |P_c|). Returns the M votes.
std::vector<double> PrivateEvolution::vote(const State& st, const std::vector<Class>& classes,
                                           const torch::Tensor& priv_emb, const torch::Tensor& cand,
                                           const std::vector<int64_t>& offset, int64_t M,
                                           const std::vector<int64_t>& unit_of_row) const {
  std::vector<torch::Tensor> nn;  // (|P_c members|, k) each, candidate rows of all of cand
  std::vector<int64_t> unit_of;   // the unit of each row of cat(nn)
  for (size_t c = 0; c < classes.size(); ++c) {
    const auto& mem = classes[c].members;
    if (classes[c].seats == 0 || mem.empty()) continue;
    const int64_t len = static_cast<int64_t>(st.population[c].size());
    const torch::Tensor q = priv_emb.index_select(0, torch::tensor(mem, torch::kInt64));
    const torch::Tensor b = cand.slice(0, offset[c], offset[c] + len);
    nn.push_back(topics::knn(q, b, k_).first.to(torch::kCPU) + offset[c]);
    for (int64_t i : mem) unit_of.push_back(unit_of_row.at(static_cast<size_t>(i)));
  }
  if (nn.empty()) return std::vector<double>(static_cast<size_t>(M), 0.0);
  return privacy::nn_votes(torch::cat(nn), M, unit_of);
}

// Steps 4-5 for every class: h = max(noisy - threshold, 0), n_l selected (rank or sampled
// ∝ h), then P_t = the variations of the selected (+ the selected): not after the last
// iteration with output: selected. Adds the statistics of the released counts to s.
void PrivateEvolution::select_next(State& st, const std::vector<Class>& classes, Generators& gens,
                                   const std::vector<double>& noisy,
                                   const std::vector<int64_t>& offset, int64_t t, uint64_t seed,
                                   IterationStats& s) const {
  const bool last = t == iterations_;
  for (size_t c = 0; c < classes.size() && !interrupted(); ++c) {
    const int64_t len = static_cast<int64_t>(st.population[c].size());
    if (classes[c].seats == 0) continue;
    const std::vector<double> h = pe::threshold(
        std::vector<double>(noisy.begin() + offset[c], noisy.begin() + offset[c] + len),
        threshold_);
    for (double x : h) {
      s.positive += x > 0;
      s.top = std::max(s.top, x);
    }
    bool uniform = false;
    const std::vector<int64_t> pick =
        pe::select(h, classes[c].seats, selection_,
                   derive_seed(seed, fmt::format("pe-select-{}-{}", t, c)), &uniform);
    s.uniform_classes += uniform;
    std::vector<std::string> sel;
    std::vector<double> cnt;
    for (int64_t j : pick) {
      sel.push_back(st.population[c][static_cast<size_t>(j)]);
      cnt.push_back(h[static_cast<size_t>(j)]);
    }
    st.selected[c] = sel;
    st.selected_counts[c] = cnt;
    if (!last || output_ == PeOutput::kPopulation) {
      std::vector<std::string> next =
          vary(*gens.per_class[c], sel, variations_, seed, fmt::format("pe-vary-{}-{}", t, c));
      if (keep_selected_) next.insert(next.end(), sel.begin(), sel.end());
      st.population[c] = std::move(next);
    }
  }
}

nlohmann::json PrivateEvolution::run(RunContext& ctx, train::TrainInputs& in) {
  const Spec& spec = ctx.spec;
  check_runnable(spec, in);
  const auto t_start = std::chrono::steady_clock::now();
  // The private texts, their classes and embeddings (no release).
  std::vector<std::string> priv_texts;
  std::vector<Class> classes = make_classes(spec, in, priv_texts);
  eval::Embedder em = eval::load_embedder(embedder_, spec.device, "method " + name());
  const auto max_len = static_cast<size_t>(embed_max_length_);
  const torch::Tensor priv_emb =
      eval::embed_with_progress(em, priv_texts, embed_batch_, max_len, name() + " private");
  Generators gens = make_generators(spec, in, classes);
  const std::vector<int64_t> unit_of_row =  // privacy.unit: each private text's unit
      privacy::unit_of_rows(in.units, static_cast<int64_t>(priv_texts.size()));
  // Step 3's mechanism: the Gaussian on the vote vector (sensitivity 1), one release an
  // iteration (sigma 0, privacy.epsilon inf: the true votes, recorded as non-private).
  privacy::VoteHistogram& noise =
      ctx.privacy.votes("pe-histogram", privacy::Release{kVotesLabel, sigma_, 1.0, 1});
  const uint64_t seed = static_cast<uint64_t>(spec.seed);
  State st;
  if (!load_state(ctx, st, noise, classes))
    allocate_seats(ctx, st, noise, classes, priv_texts.size(), in.units);
  if (!st.initialised) {  // step 0: P_0 = RANDOM_API(n_l) + initial variations of each
    for (size_t c = 0; c < classes.size() && !interrupted(); ++c) {
      if (classes[c].seats == 0) continue;
      st.population[c] = initial_population(*gens.per_class[c], classes[c].seats, seed, c);
    }
    if (interrupted()) return {{"pe", {{"iterations_done", st.iteration}}}};
    st.initialised = true;
    save_state(ctx, st, noise, classes);
  }
  Progress bar(name(), static_cast<long>(iterations_));
  bar.start_at(static_cast<long>(st.iteration));
  for (int64_t done_here = 0; st.iteration < iterations_ && !interrupted(); ++done_here) {
    if (ctx.stop_after > 0 && done_here >= ctx.stop_after) {
      ctx.stopped = true;
      break;
    }
    const int64_t t = st.iteration + 1;
    IterationStats s;
    const auto t0 = std::chrono::steady_clock::now();
    // 1: embed the candidates P_{t-1} of every class, class c's at rows offset[c]..
    std::vector<std::string> all;
    std::vector<int64_t> offset;
    for (const auto& p : st.population) {
      offset.push_back(static_cast<int64_t>(all.size()));
      all.insert(all.end(), p.begin(), p.end());
    }
    s.candidates = static_cast<int64_t>(all.size());
    const torch::Tensor cand = eval::embed_with_progress(em, all, embed_batch_, max_len,
                                                         fmt::format("{} iteration {}", name(), t));
    // 2: the nearest-neighbour votes; 3: their release, in the ledger
    const std::vector<double> noisy =
        noise.release(vote(st, classes, priv_emb, cand, offset, s.candidates, unit_of_row));
    // 4-5: threshold, selection, the next population
    select_next(st, classes, gens, noisy, offset, t, seed, s);
    if (interrupted()) break;  // the iteration is not kept: resumed from the last checkpoint
    st.iteration = t;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    record_iteration(ctx, st, noise, classes, t, s);
    bar.update(static_cast<long>(t),
               fmt::format("{} of {} candidates voted for", s.positive, s.candidates));
  }
  bar.finish();
  nlohmann::json out = {{"pe", report(st, classes, gens, em.identity(max_len))}};
  if (st.iteration < iterations_) return out;  // stopped or interrupted: resume from pe_state.json
  // out: S_T (the last selection) or P_T, and the run is done
  finish(ctx, st, classes, out, t_start);
  return out;
}

void PrivateEvolution::check_runnable(const Spec& spec, const train::TrainInputs& in) const {
  const std::string m = "method " + name();
  DPFT_CHECK_AS(ConfigError, !dist::active(), "{} runs in one process; run it without --nproc", m);
  DPFT_CHECK_AS(ConfigError, spec.data.train_extra.empty(),
                "{}: data.train_extra is not supported (one private corpus)", m);
  DPFT_CHECK_AS(ConfigError, in.tok != nullptr,
                "{}: the generator (model.path) must be a decoder language model", m);
}

// The iteration's history row (statistics of the released counts, and its time), its event,
// the synthetic/iter_XXXX.jsonl of its selection and the checkpoint.
void PrivateEvolution::record_iteration(RunContext& ctx, State& st, privacy::VoteHistogram& noise,
                                        const std::vector<Class>& classes, int64_t t,
                                        const IterationStats& s) const {
  const nlohmann::json row = {{"iteration", t},
                              {"candidates", s.candidates},
                              {"positive_counts", s.positive},
                              {"max_count", s.top},
                              {"uniform_fallback_classes", s.uniform_classes},
                              {"seconds", s.seconds}};
  st.history.push_back(row);
  ctx.dir.event("pe_iteration", row);
  if (save_iterations_) write_output(ctx, st, classes, fmt::format("iter_{:04d}.jsonl", t), true);
  save_state(ctx, st, noise, classes);
}

nlohmann::json PrivateEvolution::report(const State& st, const std::vector<Class>& classes,
                                        const Generators& gens,
                                        const nlohmann::json& embedder) const {
  int64_t random_samples = 0, random_tokens = 0, var_samples = 0, var_tokens = 0;
  double gen_seconds = 0;
  for (const auto& g : gens.per_class) {
    random_samples += g->random_stats.samples;
    random_tokens += g->random_stats.tokens;
    var_samples += g->variational_stats.samples;
    var_tokens += g->variational_stats.tokens;
    gen_seconds += g->random_stats.seconds + g->variational_stats.seconds;
  }
  std::vector<int64_t> seats;
  for (const auto& c : classes) seats.push_back(c.seats);
  nlohmann::json info = {{"variant", label()},
                         {"iterations", iterations_},
                         {"iterations_done", st.iteration},
                         {"num_synthetic", num_synthetic_},
                         {"sigma", sigma_},
                         {"sigma_source", sigma_source_},
                         {"selection", enum_name(selection_, pe::kSelectionNames)},
                         {"variations", variations_},
                         {"initial_variations", initial_variations_},
                         {"keep_selected", keep_selected_},
                         {"threshold", threshold_},
                         {"nearest_neighbors", k_},
                         {"classes", classes.size()},
                         {"seats", seats},
                         {"history", st.history},
                         {"embedder", embedder},
                         {"generation",
                          {{"style", synth::name_of(gens.style)},
                           {"random_api", {{"samples", random_samples}, {"tokens", random_tokens}}},
                           {"variation_api", {{"samples", var_samples}, {"tokens", var_tokens}}},
                           {"seconds_this_invocation", gen_seconds}}}};
  if (class_release()) info["class_histogram_sigma"] = class_sigma_;
  return info;
}

// The synthetic set (synthetic/synthetic.jsonl with its provenance) and the run's synthetic and
// timing blocks. pe_state.json stays (iteration T): a resume after a crash here writes the
// output again rather than starting over.
void PrivateEvolution::finish(RunContext& ctx, const State& st, const std::vector<Class>& classes,
                              nlohmann::json& out,
                              std::chrono::steady_clock::time_point t_start) const {
  write_output(ctx, st, classes, "synthetic.jsonl", false);
  int64_t count = 0;
  for (size_t c = 0; c < classes.size(); ++c)
    count += static_cast<int64_t>(output_ == PeOutput::kSelected ? st.selected[c].size()
                                                                 : st.population[c].size());
  const fs::path file = ctx.dir.file("synthetic") / "synthetic.jsonl";
  out["synthetic"] = {
      {"file", file.string()}, {"count", count}, {"output", enum_name(output_, kPeOutputNames)}};
  out["timing"] = {
      {"seconds_this_invocation",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()}};
  ctx.finished = true;
  spdlog::info("{}: {} synthetic texts -> {}", name(), count, file.string());
}

}  // namespace

std::unique_ptr<Method> make_pe_method() {
  return std::make_unique<PrivateEvolution>(false);
}
std::unique_ptr<Method> make_aug_pe_method() {
  return std::make_unique<PrivateEvolution>(true);
}

}  // namespace dpft
