// Method `ctcl` (paper 004, Sections 3.3-3.4, Figure 1 parts B and C): DP synthetic documents
// from a DP topic histogram and a DP fine-tuned conditional generator (a BART, data.task
// seq2seq, targets = the private documents of data.train).
//   B.1  assign every private document its topic (the topic model's encoder, nearest topic
//        embedding; core/topics) -- no release
//   B.2  DP topic histogram: counts + N(0, hist_sigma^2), rounded, clamped at 0 (sensitivity 1;
//        core/privacy/histogram.hpp), one ledger release, saved as topic_histogram.json
//   B.3  DP fine-tuning of the generator on (condition -> document), condition = "Document Type:
//        <doc_type>\nKeywords: <the topic's keywords>": DP-SGD / DP-AdamW (methods/dp_sgd), its
//        sigma calibrated so that the histogram and the T steps together spend the budget
//   C    N_syn documents, apportioned to topics by the released histogram (largest remainder),
//        sampled from the fine-tuned generator with top-p and a repetition penalty, post-filtered
//        (methods/ctcl/synthesis.hpp), written to synthetic/synthetic.jsonl -- post-processing;
//        `generation.subsets` also writes smaller sets (synthetic_n<N>.jsonl, N apportioned the
//        same way, each bin's first documents of the same generation) for Fig. 3's scaling in
//        N_syn
// `keywords: false` is Table 5's "vanilla" generator: no topics, no histogram (the whole budget
// to fine-tuning), sources "Document Type: <doc_type>" only.
// A labelled private set (`label_columns` with their public `label_values`, e.g. Yelp's stars)
// puts each document's class into its condition ("Review Stars: 5.0" lines between the document
// type and the keywords), and the histogram counts (topic, class) bins (class bins without
// keywords): still one release of sensitivity 1, each document in one bin. The synthetic
// documents carry their class's label columns, for a downstream classifier.
// privacy.unit user: B.2 counts each user once, in the bin most of its documents fall in
// (privacy::unit_bins; sensitivity 1 per user), and B.3 clips each sampled user's summed
// gradient (methods/dp_sgd); documents keep their own bin's condition for training.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <unordered_map>

#include "core/config/fields.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/eval/embed.hpp"
#include "core/generate/generate.hpp"
#include "core/privacy/histogram.hpp"
#include "core/run/privacy_lock.hpp"
#include "core/run/provenance.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/progress.hpp"
#include "core/util/seed.hpp"
#include "core/util/sha256.hpp"
#include "core/util/signals.hpp"
#include "data/lm_dataset.hpp"
#include "methods/ctcl/synthesis.hpp"
#include "methods/ctcl/synthetic_sets.hpp"
#include "methods/dp_sgd/dp_sgd_loop.hpp"
#include "methods/method.hpp"

namespace dpft {

namespace {

// A generated text may end inside a multi-byte character: invalid bytes become U+FFFD.
constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

struct CtclGeneration {
  int64_t num_synthetic = 100;  // N_syn
  int64_t max_new_tokens = 128;
  double top_p = 0.95;
  double temperature = 1.0;
  double repetition_penalty = 1.5;
  int64_t batch = 16;
  // Smaller N_syn for the scaling figure (Fig. 3): per bin, the first seats of the same
  // generation, written as synthetic/synthetic_n<N>.jsonl (post-processing: no cost).
  std::vector<int64_t> subsets;
};

class CtclMethod : public MethodOf<CtclMethod> {
 public:
  // privacy.unit user: the histogram through privacy::unit_bins, the steps as dp-sgd's
  bool honours_unit(privacy::PrivacyUnit) const override { return true; }
  bool steps_by_dp_sgd() const override { return true; }  // the steps: train::clipped_sum
  std::string name() const override { return "ctcl"; }
  std::string label() const override { return keywords_ ? "CTCL" : "DP fine-tuned generator"; }
  bool needs_seq2seq() const override { return true; }
  bool makes_sources() const override { return true; }          // each from its document's topic
  bool delta_auto_by_default() const override { return true; }  // 1 / (N ln N), Appendix E

  void configure(Fields& f) override {
    f.get("keywords", keywords_);            // false: no topics / histogram (Table 5's vanilla)
    f.get("topic_model", topic_model_);      // dpft topics build --out DIR
    f.get("topic_encoder", topic_encoder_);  // "": the encoder the topic model records
    f.get("doc_type", doc_type_);            // "Document Type: <doc_type>" in every condition
    f.get("hist_sigma", hist_sigma_, Range::above(0));  // the topic histogram's noise multiplier
    // condition tokens, <s> </s> included
    f.get("max_source_length", max_source_length_, Range::at_least(3));
    // documents per encoder forward (topic assignment)
    f.get("embed_batch", embed_batch_, Range::at_least(1));
    labels_.read(f, name());
    Fields g = f.child("generation");
    g.get("num_synthetic", gen_.num_synthetic, Range::closed(1, 1e7));  // 10^7: a bound, not a goal
    g.get("max_new_tokens", gen_.max_new_tokens, Range::at_least(1));
    g.get("top_p", gen_.top_p, Range{0, 1, true, false});
    g.get("temperature", gen_.temperature, Range::above(0));
    g.get("repetition_penalty", gen_.repetition_penalty, Range::at_least(1));
    g.get("batch", gen_.batch, Range::at_least(1));
    g.get("subsets", gen_.subsets, Range::at_least(1));  // smaller N_syn, same generation (Fig. 3)
    g.finish();
    std::sort(gen_.subsets.begin(), gen_.subsets.end());
    for (size_t i = 0; i < gen_.subsets.size(); ++i)
      DPFT_CHECK_AS(ConfigError,
                    gen_.subsets[i] < gen_.num_synthetic &&
                        (i == 0 || gen_.subsets[i] != gen_.subsets[i - 1]),
                    "method.generation.subsets: {} is {}; give distinct sizes below "
                    "num_synthetic ({}), e.g. [50, 100]",
                    gen_.subsets[i],
                    gen_.subsets[i] >= gen_.num_synthetic ? "not below num_synthetic" : "repeated",
                    gen_.num_synthetic);
    Fields flt = f.child("filter");
    flt.get("max_word_length", max_word_length_, Range::at_least(1));
    flt.get("max_repeat", max_repeat_, Range::at_least(1));
    flt.finish();
    DPFT_CHECK_AS(ConfigError, !keywords_ || !topic_model_.empty(),
                  "method.topic_model: ctcl needs a topic model (dpft topics build --out DIR); "
                  "or keywords: false for the vanilla DP fine-tuned generator");
  }

  // The histogram (sigma_hist, q 1, once) and the T steps; the steps' sigma is calibrated with
  // the histogram composed in (privacy.epsilon inf: neither is noised).
  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override {
    hist_release_sigma_ = histogram_released() && spec.privacy.is_private() ? hist_sigma_ : 0.0;
    std::vector<privacy::GaussianBlock> fixed;
    if (hist_release_sigma_ > 0) fixed.push_back({hist_release_sigma_, 1.0, 1});
    for (const auto& b : train::count_blocks(spec, n)) fixed.push_back(b);  // adaptive clipping
    dp_ = train::resolve_dp(spec, n, inherited.releases, fixed);
    std::vector<privacy::Release> out;
    if (histogram_released()) out.push_back({"topic_histogram", hist_release_sigma_, 1.0, 1});
    out.push_back(dp_->release(dp_->steps));
    if (dp_->adaptive) out.push_back(dp_->count_release(dp_->steps));
    return out;
  }

  nlohmann::json plan_settings() const override {
    nlohmann::json j = dp_->to_json();
    if (histogram_released()) j["topic_histogram_sigma"] = hist_release_sigma_;
    return j;
  }

  nlohmann::json run(RunContext& ctx, train::TrainInputs& in) override;

 private:
  // B.1-B.2: topics of the private documents and the released histogram (loaded again on
  // --resume: one release per run).
  std::vector<int64_t> assign_topics(const Spec& spec, const DatasetSpec& block,
                                     const std::string& where, const lm::LmDataset& set,
                                     const topics::TopicModel& tm) const;
  std::vector<int64_t> histogram(RunContext& ctx, const std::vector<int64_t>& topic_of, int64_t K,
                                 const privacy::Units& units) const;
  // Each document's class (0 when unlabelled); C classes.
  struct Labelled {
    ctcl::Classes classes;
    int64_t C = 1;
    std::vector<int64_t> train, eval;
  };
  // The bins: their conditions, what each synthetic row of a bin carries, each document's bin
  // and the released histogram.
  struct Bins {
    std::vector<std::string> conditions;
    std::vector<nlohmann::json> fields;
    std::vector<int64_t> train, eval, hist;
  };
  Labelled label_documents(const Spec& spec, const train::TrainInputs& in) const;
  Bins make_bins(RunContext& ctx, const train::TrainInputs& in, const Labelled& l,
                 nlohmann::json& info) const;
  std::optional<std::string> generate_bin(RunContext& ctx, train::TrainInputs& in,
                                          generate::GenerationOptions go,
                                          const std::vector<int32_t>& source,
                                          const nlohmann::json& fields, size_t k, int64_t count,
                                          Progress& bar, int64_t done) const;
  nlohmann::json synthesize(RunContext& ctx, train::TrainInputs& in,
                            const std::vector<std::vector<int32_t>>& sources,
                            const std::vector<int64_t>& hist, const std::vector<int64_t>& seats,
                            const std::vector<nlohmann::json>& bin_fields) const;

  // The histogram is released with keywords (topic or (topic, class) bins) or with classes
  // (class bins): N_syn is apportioned by it.
  bool histogram_released() const { return keywords_ || labels_.on(); }

  bool keywords_ = true;
  ctcl::LabelOptions labels_;
  std::string topic_model_, topic_encoder_, doc_type_;
  double hist_sigma_ = 10;
  int64_t max_source_length_ = 128, embed_batch_ = 32, max_repeat_ = 20;
  int64_t max_word_length_ = 25;
  CtclGeneration gen_;
  double hist_release_sigma_ = 0;
  std::optional<train::DpSettings> dp_;
};

std::vector<int64_t> CtclMethod::assign_topics(const Spec& spec, const DatasetSpec& block,
                                               const std::string& where, const lm::LmDataset& set,
                                               const topics::TopicModel& tm) const {
  std::unordered_map<int64_t, std::string> text_of;
  for (auto& e : data::read_examples(block, where)) text_of.emplace(e.index, std::move(e.text));
  std::vector<std::string> texts;
  texts.reserve(set.items.size());
  for (const auto& it : set.items) texts.push_back(text_of.at(it.index));
  eval::Embedder em = eval::load_embedder_matching(
      tm.embedder, topic_encoder_, spec.device, "method ctcl: topic model " + topic_model_,
      "set method.topic_encoder to that encoder's directory");
  const size_t max_length = tm.embedder.value("max_length", size_t{0});
  const torch::Tensor x =
      eval::embed_with_progress(em, texts, embed_batch_, max_length, "ctcl topics (" + where + ")");
  const torch::Tensor idx = topics::nearest(x, tm.centroids).first;
  return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
}

namespace {
// The topic histogram file's integrity hash: the run's lock, sigma, K and the released counts.
std::string histogram_integrity(const RunContext& ctx, const std::vector<int64_t>& counts,
                                int64_t K) {
  return state_integrity(ctx.privacy_lock, "topic_histogram", {{"topics", K}, {"counts", counts}});
}
}  // namespace

std::vector<int64_t> CtclMethod::histogram(RunContext& ctx, const std::vector<int64_t>& topic_of,
                                           int64_t K, const privacy::Units& units) const {
  const fs::path file = ctx.dir.file("topic_histogram.json");
  const privacy::Release rel{"topic_histogram", hist_release_sigma_, 1.0, 1};
  // B.2: the Gaussian mechanism on the bin counts (sensitivity 1); privacy.epsilon inf: sigma
  // 0, the true counts, recorded as a non-private release.
  privacy::Histogram& mechanism = ctx.privacy.histogram("ctcl-histogram", rel);
  // Training began after the release: a missing file is refused, never drawn again (a second
  // draw would be a second release while the checkpoint's ledger holds one).
  DPFT_CHECK_AS(InputError,
                !ctx.resume || fs::exists(file) ||
                    (!fs::exists(ctx.dir.file("checkpoint")) && ctx.dir.count_events("step") == 0),
                "--resume: refused: {} is missing, but the run released its topic histogram "
                "before training began; restore the file, or start a new run",
                file.string());
  if (ctx.resume && fs::exists(file)) {
    // Released before: reuse it. The ledger holds it when a checkpoint restored the ledger;
    // without a checkpoint (killed before step 1) the fresh ledger needs it again.
    const nlohmann::json j = read_json(file);
    std::vector<int64_t> counts;
    try {
      counts = j.at("counts").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format(
          "{}: no list of integer 'counts' ({}). The histogram was released when the run "
          "started and must not be released again: restore the file, or start a new run",
          file.string(), e.what()));
    }
    DPFT_CHECK_AS(InputError, static_cast<int64_t>(counts.size()) == K,
                  "{}: {} topics, the topic model has {}", file.string(), counts.size(), K);
    // The released counts, unchanged since: an edited histogram would apportion the synthetic
    // set by numbers the mechanism never released.
    DPFT_CHECK_AS(InputError, j.value("integrity", "") == histogram_integrity(ctx, counts, K),
                  "--resume: refused: {} was changed after it was released (its integrity hash "
                  "does not match its counts); restore the file as the run wrote it, or start "
                  "a new run",
                  file.string());
    if (!fs::exists(ctx.dir.file("checkpoint"))) mechanism.restore();
    spdlog::info("ctcl: the topic histogram released earlier ({})", file.string());
    return counts;
  }
  const std::vector<int64_t> counts = mechanism.release(topic_of, K, units);
  write_json_atomic(file, {{"schema", "dpft.topic_histogram/1"},
                           {"noise_multiplier", hist_release_sigma_},
                           {"private", hist_release_sigma_ > 0},
                           {"topics", K},
                           {"counts", counts},
                           {"integrity", histogram_integrity(ctx, counts, K)},
                           {"provenance", make_provenance(ctx)}});
  return counts;
}

// Bin k's `count` documents from its source, generation.batch at a time: each row the bin's
// fields, the text and, for a row the filter drops, "dropped": the reason. nullopt when
// SIGINT / SIGTERM arrived (the bin unwritten).
std::optional<std::string> CtclMethod::generate_bin(RunContext& ctx, train::TrainInputs& in,
                                                    generate::GenerationOptions go,
                                                    const std::vector<int32_t>& source,
                                                    const nlohmann::json& fields, size_t k,
                                                    int64_t count, Progress& bar,
                                                    int64_t done) const {
  auto decode = [&](const std::vector<int64_t>& ids) {
    std::vector<tok::TokenId> t(ids.begin(), ids.end());
    return in.tok->decode(t, true);
  };
  std::string lines;
  for (int64_t b = 0; b < count; b += gen_.batch) {
    if (interrupted()) return std::nullopt;
    const int64_t n = std::min(gen_.batch, count - b);
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(n),
                                              std::vector<int64_t>(source.begin(), source.end()));
    go.seed =
        derive_seed(static_cast<uint64_t>(ctx.spec.seed), fmt::format("ctcl-generate-{}-{}", k, b));
    for (const auto& g : generate::generate(*in.model, prompts, go, decode)) {
      const std::string why =
          ctcl::filter_reason(g.text, static_cast<size_t>(max_word_length_), max_repeat_);
      nlohmann::json row = fields;  // topic (and the class's label columns)
      row["text"] = g.text;
      if (!why.empty()) row["dropped"] = why;
      lines += row.dump(-1, ' ', false, kReplace) + "\n";
    }
    bar.update(static_cast<long>(done + b + n));
  }
  return lines;
}

// C: N_syn documents sampled bin by bin from the DP-trained generator, post-filtered, written as
// the synthetic sets (methods/ctcl/synthetic_sets.hpp). One file per bin, written whole: a
// resumed generation skips the bins already done.
nlohmann::json CtclMethod::synthesize(RunContext& ctx, train::TrainInputs& in,
                                      const std::vector<std::vector<int32_t>>& sources,
                                      const std::vector<int64_t>& hist,
                                      const std::vector<int64_t>& seats,
                                      const std::vector<nlohmann::json>& bin_fields) const {
  torch::NoGradGuard ng;
  in.model->eval();
  const fs::path dir = ctx.dir.file("synthetic");
  fs::create_directories(dir);
  // Bin k is sampled gen[k] times: the most seats any of the sizes gives it (largest remainder
  // can give a bin more seats at a smaller total); each size takes its first seats of each bin.
  std::vector<std::vector<int64_t>> subset_seats;
  std::vector<int64_t> gen = seats;
  for (int64_t n : gen_.subsets) {
    subset_seats.push_back(ctcl::apportion(hist, n));
    for (size_t k = 0; k < gen.size(); ++k) gen[k] = std::max(gen[k], subset_seats.back()[k]);
  }
  generate::GenerationOptions go;
  go.do_sample = true;
  go.top_p = gen_.top_p;
  go.temperature = gen_.temperature;
  go.repetition_penalty = gen_.repetition_penalty;
  go.max_new_tokens = gen_.max_new_tokens;
  go.stop_ids = {static_cast<int64_t>(*in.tok->eos_id())};
  go.pad_id = in.pad_id;
  int64_t total = 0, done = 0, bins_generated = 0;
  for (int64_t s : gen) total += s;
  Progress bar("ctcl generate", static_cast<long>(total));
  ctcl::SyntheticSets sets(dir, seats, subset_seats, gen_.subsets);
  ctcl::PartIndex index(dir);
  for (size_t k = 0; k < gen.size(); ++k) {
    if (gen[k] == 0) continue;
    // SIGINT / SIGTERM: stop between bins (the done ones are on disk; no set is committed), the
    // trainer keeps its checkpoint and the resume generates the remaining bins.
    const nlohmann::json stopped = {{"interrupted", true}, {"bins_done", k}};
    if (interrupted()) return stopped;
    const fs::path part = dir / fmt::format("topic-{:05d}.jsonl", k);
    std::optional<std::string> lines = index.reuse(part);
    if (!lines) {
      lines = generate_bin(ctx, in, go, sources[k], bin_fields[k], k, gen[k], bar, done);
      if (!lines) return stopped;
      index.record(part, *lines);
      fault_point(fmt::format("ctcl_bins{}", ++bins_generated).c_str());
    }
    done += gen[k];
    bar.update(static_cast<long>(done));
    sets.add(k, *lines, gen[k], part);
  }
  bar.finish();
  nlohmann::json out = sets.commit();
  write_provenance(dir, ctx);  // the sets embody the histogram and the training
  spdlog::info("ctcl: {} synthetic documents generated, {} kept, {} dropped by the filter",
               out["requested"].get<int64_t>(), out["kept"].get<int64_t>(),
               out["dropped"].get<int64_t>());
  return out;
}

// Labels: each document's class among the combinations of the public values (0 when
// unlabelled), for data.train and data.eval.
CtclMethod::Labelled CtclMethod::label_documents(const Spec& spec,
                                                 const train::TrainInputs& in) const {
  Labelled l;
  l.train.assign(in.train.items.size(), 0);
  l.eval.assign(in.eval.items.size(), 0);
  if (!labels_.on()) return l;
  l.classes = ctcl::class_combinations(labels_.values);
  l.C = l.classes.size();
  auto classes_of = [&](const lm::LmDataset& set, const DatasetSpec& block, const std::string& m) {
    std::vector<int64_t> rows;
    for (const auto& it : set.items) rows.push_back(it.index);
    return ctcl::classes_of_rows(block.path, block.format, rows, labels_.columns, l.classes, m);
  };
  l.train = classes_of(in.train, spec.data.train, "method ctcl");
  if (!in.eval.items.empty())
    l.eval = classes_of(in.eval, spec.data.eval, "method ctcl (data.eval)");
  return l;
}

// B.1 + B.2: the bins (a document's topic, or (topic, class) = topic * C + class with classes,
// or its class alone without keywords, or one bin for all), their conditions and the released
// histogram. data.eval (a held-out validation split, for choosing the lr): each document gets
// the condition of its own bin, as a training document does, so the eval loss is the
// generator's loss on unseen documents given their conditions (not a release: eval results are
// reported as docs/outputs.md says).
CtclMethod::Bins CtclMethod::make_bins(RunContext& ctx, const train::TrainInputs& in,
                                       const Labelled& l, nlohmann::json& info) const {
  const Spec& spec = ctx.spec;
  Bins b;
  auto add_bin = [&](int64_t topic, int64_t c, const std::string& keyword_line) {
    static const std::vector<std::string> none;
    const std::vector<std::string>& lines =
        labels_.on() ? l.classes.values[static_cast<size_t>(c)] : none;
    b.conditions.push_back(ctcl::condition(doc_type_, keyword_line, lines));
    nlohmann::json f = {{"topic", topic}};  // what each synthetic row of the bin carries
    for (size_t j = 0; j < lines.size(); ++j) f[labels_.columns[j]] = lines[j];
    b.fields.push_back(f);
  };
  if (!histogram_released()) {  // the vanilla generator: one source for all, no release
    b.conditions.push_back(doc_type_.empty() ? "" : "Document Type: " + doc_type_);
    b.fields.push_back({{"topic", 0}});
    b.train.assign(in.train.items.size(), 0);
    b.eval.assign(in.eval.items.size(), 0);
    b.hist = {1};
    return b;
  }
  int64_t K = 1;  // topics (1: class bins only)
  b.train = l.train;
  b.eval = l.eval;
  std::optional<topics::TopicModel> tm;
  if (keywords_) {  // B.1: the topics (no release)
    tm = topics::load(topic_model_);
    K = tm->num_topics();
    const auto topic_of = assign_topics(spec, spec.data.train, "data.train", in.train, *tm);
    for (size_t i = 0; i < b.train.size(); ++i) b.train[i] += topic_of[i] * l.C;
    if (!in.eval.items.empty()) {
      const auto eval_topic = assign_topics(spec, spec.data.eval, "data.eval", in.eval, *tm);
      for (size_t i = 0; i < b.eval.size(); ++i) b.eval[i] += eval_topic[i] * l.C;
    }
  }
  b.hist = histogram(ctx, b.train, K * l.C, in.units);  // B.2: the one release
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < l.C; ++c) add_bin(k, c, tm ? tm->keyword_line(k) : "");
  info["histogram"] = {{"noise_multiplier", hist_release_sigma_},
                       {"bins", K * l.C},
                       {"file", ctx.dir.file("topic_histogram.json").string()}};
  if (!tm) return b;
  int64_t used = 0;
  for (int64_t c : b.hist) used += c > 0;
  info["topic_model"] = topic_model_;
  info["topics"] = K;
  info["histogram"]["topics_nonzero"] = used;
  return b;
}

nlohmann::json CtclMethod::run(RunContext& ctx, train::TrainInputs& in) {
  const Spec& spec = ctx.spec;
  DPFT_CHECK_AS(ConfigError, spec.data.train_extra.empty(),
                "method ctcl: data.train_extra is not supported (one private corpus)");
  DPFT_CHECK_AS(ConfigError, in.eval_sets.empty(),
                "method ctcl: data.eval_sets is not supported; give the validation documents as "
                "data.eval (each gets its topic's condition)");
  DPFT_CHECK_AS(ConfigError, !dist::active(),
                "method ctcl runs in one process; run it without --nproc");
  DPFT_CHECK_AS(InputError, in.tok && in.tok->eos_id(),
                "method ctcl: the generator's tokenizer has no eos");
  nlohmann::json info = {{"keywords", keywords_}, {"doc_type", doc_type_}};
  const Labelled labelled = label_documents(spec, in);
  if (labels_.on()) info["classes"] = labelled.C;
  // B.1 + B.2: each document's bin and the DP histogram of the bins
  const Bins bins = make_bins(ctx, in, labelled, info);
  // B.3: the sources, then DP fine-tuning; C as post-processing once training is done.
  std::vector<std::vector<int32_t>> sources;
  for (const auto& c : bins.conditions)
    sources.push_back(data::seq2seq_ids(c, *in.tok, max_source_length_));
  for (size_t i = 0; i < in.train.items.size(); ++i)
    in.train.items[i].src_ids = sources[static_cast<size_t>(bins.train[i])];
  for (size_t i = 0; i < in.eval.items.size(); ++i)
    in.eval.items[i].src_ids = sources[static_cast<size_t>(bins.eval[i])];
  // C: N_syn apportioned to the bins by the released histogram (largest remainder)
  bool uniform = false;
  const std::vector<int64_t> seats = ctcl::apportion(bins.hist, gen_.num_synthetic, &uniform);
  if (uniform)
    spdlog::warn(
        "ctcl: the released histogram is all zero; the {} documents are spread evenly "
        "over the topics",
        gen_.num_synthetic);
  info["uniform_apportionment"] = uniform;
  dp_sgd::DpSgdOptions o;
  o.method_info = info;
  o.after_training_key = "synthetic";
  o.after_training = [&] { return synthesize(ctx, in, sources, bins.hist, seats, bins.fields); };
  nlohmann::json out = dp_sgd::run_dp_sgd(ctx, in, *dp_, o);
  out["ctcl"] = info;
  return out;
}

}  // namespace

std::unique_ptr<Method> make_ctcl_method() {
  return std::make_unique<CtclMethod>();
}

}  // namespace dpft
