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
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
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

class CtclMethod : public Method {
 public:
  std::string name() const override { return "ctcl"; }
  std::string label() const override { return keywords_ ? "CTCL" : "DP fine-tuned generator"; }
  bool needs_seq2seq() const override { return true; }
  bool makes_sources() const override { return true; }          // each from its document's topic
  bool delta_auto_by_default() const override { return true; }  // 1 / (N ln N), Appendix E

  void configure(Fields& f) override {
    f.get("keywords", keywords_);
    f.get("topic_model", topic_model_);
    f.get("topic_encoder", topic_encoder_);
    f.get("doc_type", doc_type_);
    f.get("hist_sigma", hist_sigma_, Range::above(0));
    f.get("max_source_length", max_source_length_, Range::at_least(3));
    f.get("embed_batch", embed_batch_, Range::at_least(1));
    labels_.read(f, name());
    Fields g = f.child("generation");
    g.get("num_synthetic", gen_.num_synthetic, Range::closed(1, 1e7));  // 10^7: a bound, not a goal
    g.get("max_new_tokens", gen_.max_new_tokens, Range::at_least(1));
    g.get("top_p", gen_.top_p, Range{0, 1, true, false});
    g.get("temperature", gen_.temperature, Range::above(0));
    g.get("repetition_penalty", gen_.repetition_penalty, Range::at_least(1));
    g.get("batch", gen_.batch, Range::at_least(1));
    g.get("subsets", gen_.subsets, Range::at_least(1));
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

  YAML::Node options_yaml() const override {
    YAML::Node n;
    n["keywords"] = keywords_;        // false: no topics / histogram (Table 5's vanilla)
    n["topic_model"] = topic_model_;  // dpft topics build --out DIR
    n["topic_encoder"] = topic_encoder_;  // "": the encoder the topic model records
    n["doc_type"] = doc_type_;        // "Document Type: <doc_type>" in every condition
    n["hist_sigma"] = hist_sigma_;    // noise multiplier of the topic histogram
    n["max_source_length"] = max_source_length_;  // condition tokens, <s> </s> included
    n["embed_batch"] = embed_batch_;  // documents per encoder forward (topic assignment)
    labels_.write(n);
    YAML::Node g;
    g["num_synthetic"] = gen_.num_synthetic;
    g["max_new_tokens"] = gen_.max_new_tokens;
    g["top_p"] = gen_.top_p;
    g["temperature"] = gen_.temperature;
    g["repetition_penalty"] = gen_.repetition_penalty;
    g["batch"] = gen_.batch;
    g["subsets"] = gen_.subsets;  // smaller N_syn from the same generation (Fig. 3)
    n["generation"] = g;
    YAML::Node flt;
    flt["max_word_length"] = max_word_length_;
    flt["max_repeat"] = max_repeat_;
    n["filter"] = flt;
    return n;
  }

  // The histogram (sigma_hist, q 1, once) and the T steps; the steps' sigma is calibrated with
  // the histogram composed in (privacy.epsilon inf: neither is noised).
  std::vector<privacy::Release> plan(const Spec& spec, int64_t n,
                                     const Inheritance& inherited) override {
    hist_release_sigma_ = histogram_released() && spec.privacy.is_private() ? hist_sigma_ : 0.0;
    std::vector<privacy::GaussianBlock> fixed;
    if (hist_release_sigma_ > 0) fixed.push_back({hist_release_sigma_, 1.0, 1});
    dp_ = train::resolve_dp(spec, n, inherited.releases, fixed);
    std::vector<privacy::Release> out;
    if (histogram_released()) out.push_back({"topic_histogram", hist_release_sigma_, 1.0, 1});
    out.push_back(dp_->release(dp_->steps));
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
  std::vector<int64_t> histogram(RunContext& ctx, const std::vector<int64_t>& topic_of,
                                 int64_t K) const;
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
                                           int64_t K) const {
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
  const std::vector<int64_t> counts = mechanism.release(topic_of, K);
  write_json_atomic(file, {{"schema", "dpft.topic_histogram/1"},
                           {"noise_multiplier", hist_release_sigma_},
                           {"private", hist_release_sigma_ > 0},
                           {"topics", K},
                           {"counts", counts},
                           {"integrity", histogram_integrity(ctx, counts, K)},
                           {"provenance", make_provenance(ctx)}});
  return counts;
}

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
  auto decode = [&](const std::vector<int64_t>& ids) {
    std::vector<tok::TokenId> t(ids.begin(), ids.end());
    return in.tok->decode(t, true);
  };
  int64_t total = 0;
  for (int64_t s : gen) total += s;
  Progress bar("ctcl generate", static_cast<long>(total));
  int64_t done = 0;
  // Every set (the main one, then each subset) is written as the bins come, one bin's rows in
  // memory at a time: each takes the first seats of every bin, less the filter's drops.
  struct SetOut {
    const std::vector<int64_t>* take;
    fs::path file;
    std::unique_ptr<AtomicFileWriter> writer;  // committed once every bin is in
    int64_t requested = 0, kept = 0;
    std::map<std::string, int64_t> dropped{};
  };
  std::vector<SetOut> sets;
  sets.push_back({&seats, dir / "synthetic.jsonl", nullptr});
  for (size_t i = 0; i < gen_.subsets.size(); ++i)
    sets.push_back(
        {&subset_seats[i], dir / fmt::format("synthetic_n{}.jsonl", gen_.subsets[i]), nullptr});
  for (auto& set : sets) set.writer = std::make_unique<AtomicFileWriter>(set.file);
  // The bins already generated, with their SHA-256 (synthetic/parts.json, rewritten after each
  // bin): a resumed generation reuses a part only when it is unchanged, regenerates one the
  // index does not list (killed between the part and the index: the same seed gives the same
  // rows), and refuses one that was edited.
  const fs::path index_file = dir / "parts.json";
  nlohmann::json index = {{"schema", "dpft.synthetic_parts/1"},
                          {"parts", nlohmann::json::object()}};
  if (fs::exists(index_file)) index = read_json(index_file);
  int64_t bins_generated = 0;
  for (size_t k = 0; k < gen.size(); ++k) {
    if (gen[k] == 0) continue;
    // SIGINT / SIGTERM: stop between bins (the done ones are on disk; no set is committed), the
    // trainer keeps its checkpoint and the resume generates the remaining bins.
    if (interrupted()) return {{"interrupted", true}, {"bins_done", k}};
    // One file per bin (topic, or topic x class), written whole: a resumed generation skips the
    // bins already done.
    const fs::path part = dir / fmt::format("topic-{:05d}.jsonl", k);
    std::string lines;
    const std::string name = part.filename().string();
    const std::string recorded = index["parts"].value(name, std::string());
    if (fs::exists(part) && !recorded.empty()) {
      lines = read_file(part);
      DPFT_CHECK_AS(InputError, sha256_hex(lines) == recorded,
                    "--resume: refused: {} was changed after it was generated (its SHA-256 is "
                    "not the one in {}); delete it and resume to generate the bin again",
                    part.string(), index_file.string());
    } else {
      for (int64_t b = 0; b < gen[k]; b += gen_.batch) {
        if (interrupted()) return {{"interrupted", true}, {"bins_done", k}};  // bin unwritten
        const int64_t n = std::min(gen_.batch, gen[k] - b);
        std::vector<std::vector<int64_t>> prompts(
            static_cast<size_t>(n), std::vector<int64_t>(sources[k].begin(), sources[k].end()));
        go.seed = derive_seed(static_cast<uint64_t>(ctx.spec.seed),
                              fmt::format("ctcl-generate-{}-{}", k, b));
        for (const auto& g : generate::generate(*in.model, prompts, go, decode)) {
          const std::string why =
              ctcl::filter_reason(g.text, static_cast<size_t>(max_word_length_), max_repeat_);
          nlohmann::json row = bin_fields[k];  // topic (and the class's label columns)
          row["text"] = g.text;
          if (!why.empty()) row["dropped"] = why;
          lines += row.dump(-1, ' ', false, kReplace) + "\n";
        }
        bar.update(static_cast<long>(done + b + n));
      }
      write_file_atomic(part, lines);
      index["parts"][name] = sha256_hex(lines);
      write_json_atomic(index_file, index);
      fault_point(fmt::format("ctcl_bins{}", ++bins_generated).c_str());
    }
    done += gen[k];
    bar.update(static_cast<long>(done));
    // This bin's rows as the sets write them: the kept line, or the filter's reason.
    std::vector<std::pair<std::string, std::string>> rows;
    for (size_t b = 0, e; b < lines.size(); b = e + 1) {
      e = lines.find('\n', b);
      if (e == std::string::npos) e = lines.size();
      if (e == b) continue;
      nlohmann::json row = nlohmann::json::parse(lines.substr(b, e - b));
      std::string why = row.value("dropped", "");
      row.erase("dropped");
      rows.emplace_back(why.empty() ? row.dump(-1, ' ', false, kReplace) + "\n" : "",
                        std::move(why));
    }
    DPFT_CHECK_AS(InputError, static_cast<int64_t>(rows.size()) == gen[k],
                  "{}: {} documents, this run samples {} for the bin; the file was not written "
                  "by this run's generation: delete {} and resume to sample again",
                  part.string(), rows.size(), gen[k], dir.string());
    for (auto& set : sets)
      for (int64_t i = 0; i < (*set.take)[k]; ++i) {
        const auto& [line, why] = rows[static_cast<size_t>(i)];
        ++set.requested;
        if (!why.empty()) {  // repetitions counted together, whichever the word
          ++set.dropped[why.rfind('\'', 0) == 0 ? "a word repeated too often" : why];
          continue;
        }
        ++set.kept;
        set.writer->write(line.data(), line.size());
      }
  }
  bar.finish();
  auto summary = [](SetOut& set) {
    set.writer->commit();
    nlohmann::json drops = nlohmann::json::object();
    for (const auto& [why, n] : set.dropped) drops[why] = n;
    return nlohmann::json{{"requested", set.requested},
                          {"kept", set.kept},
                          {"dropped", set.requested - set.kept},
                          {"dropped_by_reason", drops},
                          {"file", set.file.string()}};
  };
  nlohmann::json out = summary(sets[0]);
  write_provenance(dir, ctx);  // the sets embody the histogram and the training
  spdlog::info("ctcl: {} synthetic documents generated, {} kept, {} dropped by the filter",
               out["requested"].get<int64_t>(), out["kept"].get<int64_t>(),
               out["dropped"].get<int64_t>());
  if (sets.size() > 1) {
    out["subsets"] = nlohmann::json::array();
    for (size_t i = 1; i < sets.size(); ++i) out["subsets"].push_back(summary(sets[i]));
  }
  return out;
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
  // B.1 + B.2 (or one source for all without keywords). A document's bin: its topic, or
  // (topic, class) = topic * C + class with classes, or its class alone without keywords.
  std::vector<std::string> conditions;
  std::vector<nlohmann::json> bin_fields;  // what each synthetic row of a bin carries
  std::vector<int64_t> bin_of(in.train.items.size(), 0), hist;
  nlohmann::json info = {{"keywords", keywords_}, {"doc_type", doc_type_}};
  ctcl::Classes classes;
  std::vector<int64_t> class_of(in.train.items.size(), 0);
  if (labels_.on()) {
    classes = ctcl::class_combinations(labels_.values);
    std::vector<int64_t> rows;
    for (const auto& it : in.train.items) rows.push_back(it.index);
    class_of = ctcl::classes_of_rows(spec.data.train.path, spec.data.train.format, rows,
                                     labels_.columns, classes, "method ctcl");
    info["classes"] = classes.size();
  }
  // data.eval (a held-out validation split, for choosing the lr): each document gets the
  // condition of its own bin, as a training document does, so the eval loss is the generator's
  // loss on unseen documents given their conditions. Not a release: eval results are reported
  // as docs/outputs.md says.
  std::vector<int64_t> eval_bin(in.eval.items.size(), 0), eval_class(in.eval.items.size(), 0);
  if (labels_.on() && !in.eval.items.empty()) {
    std::vector<int64_t> rows;
    for (const auto& it : in.eval.items) rows.push_back(it.index);
    eval_class = ctcl::classes_of_rows(spec.data.eval.path, spec.data.eval.format, rows,
                                       labels_.columns, classes, "method ctcl (data.eval)");
  }
  const int64_t C = labels_.on() ? classes.size() : 1;
  auto fields_of = [&](int64_t topic, int64_t c) {
    nlohmann::json f = {{"topic", topic}};
    if (labels_.on())
      for (size_t j = 0; j < labels_.columns.size(); ++j)
        f[labels_.columns[j]] = classes.values[static_cast<size_t>(c)][j];
    return f;
  };
  const std::vector<std::string> none;
  auto class_lines = [&](int64_t c) -> const std::vector<std::string>& {
    return labels_.on() ? classes.values[static_cast<size_t>(c)] : none;
  };
  if (keywords_) {
    const topics::TopicModel tm = topics::load(topic_model_);
    const std::vector<int64_t> topic_of =
        assign_topics(spec, spec.data.train, "data.train", in.train, tm);
    for (size_t i = 0; i < bin_of.size(); ++i) bin_of[i] = topic_of[i] * C + class_of[i];
    if (!in.eval.items.empty()) {
      const std::vector<int64_t> eval_topic =
          assign_topics(spec, spec.data.eval, "data.eval", in.eval, tm);
      for (size_t i = 0; i < eval_bin.size(); ++i) eval_bin[i] = eval_topic[i] * C + eval_class[i];
    }
    hist = histogram(ctx, bin_of, tm.num_topics() * C);
    for (int64_t k = 0; k < tm.num_topics(); ++k)
      for (int64_t c = 0; c < C; ++c) {
        conditions.push_back(ctcl::condition(doc_type_, tm.keyword_line(k), class_lines(c)));
        bin_fields.push_back(fields_of(k, c));
      }
    int64_t used = 0;
    for (int64_t c : hist) used += c > 0;
    info["topic_model"] = topic_model_;
    info["topics"] = tm.num_topics();
    info["histogram"] = {{"noise_multiplier", hist_release_sigma_},
                         {"bins", tm.num_topics() * C},
                         {"topics_nonzero", used},
                         {"file", ctx.dir.file("topic_histogram.json").string()}};
  } else if (labels_.on()) {  // the vanilla generator on a labelled set: class bins only
    bin_of = class_of;
    eval_bin = eval_class;
    hist = histogram(ctx, bin_of, C);
    for (int64_t c = 0; c < C; ++c) {
      conditions.push_back(ctcl::condition(doc_type_, "", class_lines(c)));
      bin_fields.push_back(fields_of(0, c));
    }
    info["histogram"] = {{"noise_multiplier", hist_release_sigma_},
                         {"bins", C},
                         {"file", ctx.dir.file("topic_histogram.json").string()}};
  } else {
    conditions.push_back(doc_type_.empty() ? "" : "Document Type: " + doc_type_);
    bin_fields.push_back(fields_of(0, 0));
    hist = {1};
  }
  // B.3: the sources, then DP fine-tuning; C as post-processing once training is done.
  std::vector<std::vector<int32_t>> sources;
  for (const auto& c : conditions)
    sources.push_back(data::seq2seq_ids(c, *in.tok, max_source_length_));
  for (size_t i = 0; i < in.train.items.size(); ++i)
    in.train.items[i].src_ids = sources[static_cast<size_t>(bin_of[i])];
  for (size_t i = 0; i < in.eval.items.size(); ++i)
    in.eval.items[i].src_ids = sources[static_cast<size_t>(eval_bin[i])];
  bool uniform = false;
  const std::vector<int64_t> seats = ctcl::apportion(hist, gen_.num_synthetic, &uniform);
  if (uniform)
    spdlog::warn(
        "ctcl: the released histogram is all zero; the {} documents are spread evenly "
        "over the topics",
        gen_.num_synthetic);
  info["uniform_apportionment"] = uniform;
  dp_sgd::DpSgdOptions o;
  o.method_info = info;
  o.after_training_key = "synthetic";
  o.after_training = [&] { return synthesize(ctx, in, sources, hist, seats, bin_fields); };
  nlohmann::json out = dp_sgd::run_dp_sgd(ctx, in, *dp_, o);
  out["ctcl"] = info;
  return out;
}

}  // namespace

std::unique_ptr<Method> make_ctcl_method() {
  return std::make_unique<CtclMethod>();
}

}  // namespace dpft
