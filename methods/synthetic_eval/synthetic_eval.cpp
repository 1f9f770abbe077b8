#include "methods/synthetic_eval/synthetic_eval.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/eval/embed.hpp"
#include "core/report/report.hpp"
#include "core/run/runner.hpp"
#include "core/train/model_init.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/table.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft {

namespace fs = std::filesystem;

namespace {

// A data block of the spec: the file's text (and label) column, its first `max` rows when
// max > 0.
YAML::Node dataset_node(const std::string& path, const std::string& column,
                        const std::string& format, int64_t max, const std::string& label = "") {
  YAML::Node d;
  d["path"] = path;
  d["format"] = format;
  d["text_column"] = column;
  if (!label.empty()) d["label_column"] = label;
  if (max > 0) {
    d["rows"].push_back(0);
    d["rows"].push_back(max);
  }
  return d;
}

// Steps between the downstream runs' checkpoints: a quarter of the run, so that a killed
// evaluation (no signal to checkpoint on) loses at most that much when run again.
int64_t checkpoint_interval(int64_t steps) {
  return std::max<int64_t>(1, steps / 4);
}

struct FinalEval {
  nlohmann::json final;  // metrics.json's eval.final (or non_private's, see below)
  int64_t overlap = 0;   // real texts that are also synthetic ones
  std::string run_dir;
};

// A downstream run an earlier invocation left unfinished: its directory and its resolved spec.
struct Unfinished {
  std::string dir;
  Spec spec;
};

// The newest run under out/<spec.name>/ of this very configuration (config hash and seed) that
// an earlier invocation left unfinished (a signal, a kill); none when there is none.
std::optional<Unfinished> unfinished_run(const Spec& spec, const fs::path& out) {
  const fs::path group = out / spec.name;
  if (!fs::is_directory(group)) return std::nullopt;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(group))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.rbegin(), dirs.rend());  // ids are timestamps: newest first
  const std::string hash = config_hash(spec);
  for (const fs::path& d : dirs) {
    if (!fs::exists(d / "config.resolved.yaml")) continue;
    try {
      const std::string status = read_json(d / "manifest.json").value("status", "");
      if (status == "ok" || status == "failed") continue;
      Spec prev = load_spec((d / "config.resolved.yaml").string(), {});
      if (prev.seed == spec.seed && config_hash(prev) == hash)
        return Unfinished{d.string(), std::move(prev)};
    } catch (const std::exception&) {  // an unreadable leftover is not ours to continue
    }
  }
  return std::nullopt;
}

// A non-private `dpft run` of the spec in `spec`, its final evaluation on the real texts. A run
// of the same configuration that an earlier invocation left unfinished under `out` is
// continued from its checkpoint (the same numbers as an uninterrupted run, as `dpft run
// --resume`); where it cannot be (no checkpoint after recorded steps, a damaged one), a fresh
// run starts: training on synthetic texts releases nothing, so starting over costs only time.
FinalEval train_and_evaluate(const YAML::Node& spec_node, const fs::path& out, const char* what) {
  const Spec spec = parse_spec(spec_node);
  RunOptions ro;
  ro.out_dir = out.string();
  RunResult r;
  bool done = false;
  if (std::optional<Unfinished> prev = unfinished_run(spec, out)) {
    spdlog::info("eval-synthetic {}: continuing the unfinished downstream run {}", what, prev->dir);
    ro.resume_dir = prev->dir;
    try {
      r = run_method(resumable_here(std::move(prev->spec)), ro);
      done = true;
    } catch (const Error& e) {  // refused (exit 2 or 3); another process in it (4) stays fatal
      if (e.exit_code() != kExitUsage && e.exit_code() != kExitInput) throw;
      spdlog::warn("eval-synthetic {}: cannot continue {} ({}); starting a new downstream run",
                   what, prev->dir, e.what());
    }
    ro.resume_dir.clear();
  }
  if (!done) r = run_method(spec, ro);
  // An interrupted downstream run has no final score: nothing is recorded.
  if (r.status != "ok")
    throw RuntimeError(fmt::format(
        "eval-synthetic {}: the downstream run {} ended '{}' before its last step (a signal?), so "
        "there is no score to record; run the same command again: it continues that run from "
        "its checkpoint",
        what, r.run_dir, r.status));
  const auto m = nlohmann::json::parse(read_file(fs::path(r.run_dir) / "metrics.json"));
  // Real texts that are also synthetic ones move the evaluation to the non-private block
  // (docs/outputs.md); either way it is the real texts' score.
  const bool moved = m.contains("non_private") && m["non_private"].contains("eval");
  const nlohmann::json& ev = moved ? m["non_private"]["eval"] : m["eval"];
  DPFT_CHECK(ev.contains("final"), "eval-synthetic {}: the run {} recorded no final evaluation",
             what, r.run_dir);
  return {ev["final"], moved ? ev.value("overlap_with_train", int64_t{0}) : 0, r.run_dir};
}

// Trains the causal LM on the synthetic texts and evaluates it on the real ones; the run's
// directory stays under `work` (its metrics.json holds the whole history).
nlohmann::json downstream_lm(const EvalSyntheticOptions& o) {
  const LmOptions& l = o.lm;
  const fs::path work(o.work), model_dir = work / "lm-init";
  fs::create_directories(work);
  ModelInitOptions mi;
  mi.arch = "bert";
  mi.preset = l.preset;
  mi.head = "causal";
  mi.tokenizer = l.tokenizer;
  mi.out = model_dir.string();
  mi.seed = l.seed;
  const ModelInitResult init = init_model(mi);
  YAML::Node n;
  n["name"] = "eval-synthetic-lm";
  n["seed"] = l.seed;
  n["model"]["path"] = model_dir.string();
  n["model"]["peft"]["kind"] = "full";
  n["model"]["peft"]["targets"].push_back("all");
  n["data"]["train"] = dataset_node(o.synthetic, o.synthetic_column, o.format, o.max_synthetic);
  n["data"]["eval"] = dataset_node(o.real, o.real_column, o.format, o.max_real);
  n["data"]["max_length"] = l.max_length;
  n["privacy"]["epsilon"] = ".inf";
  n["train"]["steps"] = l.steps;
  n["train"]["batch_size"] = l.batch;
  n["train"]["micro_batch_size"] = std::min(l.micro, l.batch);
  n["train"]["lr"] = l.lr;
  n["train"]["schedule"] = "linear";  // run_clm's default: linear to 0, no warmup
  n["output"]["checkpoint_every"] = checkpoint_interval(l.steps);
  n["method"]["name"] = "sgd";
  n["device"] = o.device;
  const FinalEval fe = train_and_evaluate(n, work / "lm-runs", "--lm");
  const nlohmann::json& fin = fe.final;
  return {{"model", fmt::format("bert {} causal LM ({} parameters, vocab {})", l.preset,
                                init.parameters, init.vocab_size)},
          {"tokenizer", l.tokenizer},
          {"steps", l.steps},
          {"batch", l.batch},
          {"lr", l.lr},
          {"max_length", l.max_length},
          {"next_token_accuracy", fin.value("accuracy", 0.0)},
          {"perplexity", fin.value("perplexity", 0.0)},
          {"loss", fin.value("loss", 0.0)},
          {"eval_tokens", fin.value("tokens", int64_t{0})},
          {"real_texts_among_synthetic", fe.overlap},
          {"run_dir", fe.run_dir}};
}

// Trains the reheaded encoder on the labelled synthetic texts, evaluates it on the real ones.
nlohmann::json downstream_classifier(const EvalSyntheticOptions& o) {
  const ClassifierOptions& c = o.clf;
  const fs::path work(o.work), model_dir = work / "classifier-init";
  fs::create_directories(work);
  ReheadOptions ro;
  ro.from = c.from;
  ro.out = model_dir.string();
  ro.head = "classification";
  ro.labels = c.labels;
  ro.seed = c.seed;
  rehead_model(ro);
  YAML::Node n;
  n["name"] = "eval-synthetic-classifier";
  n["seed"] = c.seed;
  n["model"]["path"] = model_dir.string();
  n["model"]["peft"]["kind"] = c.peft;
  n["model"]["peft"]["targets"].push_back(c.peft == "full" ? "all" : "query");
  if (c.peft != "full") n["model"]["peft"]["targets"].push_back("value");
  n["data"]["task"] = "classification";
  for (const auto& l : c.labels) n["data"]["labels"].push_back(l);
  n["data"]["train"] =
      dataset_node(o.synthetic, o.synthetic_column, o.format, o.max_synthetic, c.label_column);
  n["data"]["eval"] = dataset_node(o.real, o.real_column, o.format, o.max_real, c.label_column);
  n["data"]["max_length"] = c.max_length;
  n["privacy"]["epsilon"] = ".inf";
  n["train"]["steps"] = c.steps;
  n["train"]["batch_size"] = c.batch;
  n["train"]["micro_batch_size"] = std::min(c.micro, c.batch);
  n["train"]["lr"] = c.lr;
  n["train"]["schedule"] = "linear";
  n["output"]["checkpoint_every"] = checkpoint_interval(c.steps);
  n["method"]["name"] = "sgd";
  n["device"] = o.device;
  const FinalEval fe = train_and_evaluate(n, work / "classifier-runs", "--classify");
  const nlohmann::json& fin = fe.final;
  nlohmann::json out = {{"from", c.from},
                        {"label_column", c.label_column},
                        {"labels", c.labels},
                        {"peft", c.peft},
                        {"steps", c.steps},
                        {"batch", c.batch},
                        {"lr", c.lr},
                        {"max_length", c.max_length},
                        {"accuracy", fin.value("accuracy", 0.0)},
                        {"loss", fin.value("loss", 0.0)},
                        {"real_texts_among_synthetic", fe.overlap},
                        {"run_dir", fe.run_dir}};
  if (fin.contains("classification"))  // macro-F1, MCC, the confusion matrix
    for (const char* k : {"macro_f1", "mcc", "confusion"})
      if (fin["classification"].contains(k)) out[k] = fin["classification"][k];
  return out;
}

// --run: points o.synthetic at the finished run's set (synthetic.jsonl, or synthetic_n<N>.jsonl
// with --subset N, then o.name n<N> unless given) and o.work inside the run; returns N_syn as
// the method asked for it (0 when unknown). InputError / ConfigError for a run that has none.
int64_t use_run_set(EvalSyntheticOptions& o, bool name_given) {
  int64_t requested = 0;
  const fs::path metrics_file = fs::path(o.run) / "metrics.json";
  DPFT_CHECK_AS(InputError, fs::exists(metrics_file),
                "--run {}: no metrics.json (not a run directory)", o.run);
  const nlohmann::json run_metrics = read_json(metrics_file);
  DPFT_CHECK_AS(ConfigError, run_metrics.value("status", "") == "ok",
                "--run {}: the run's status is '{}', not ok: finish it first (dpft run "
                "--resume)",
                o.run, run_metrics.value("status", ""));
  if (o.subset > 0) {
    o.synthetic =
        (fs::path(o.run) / "synthetic" / fmt::format("synthetic_n{}.jsonl", o.subset)).string();
    DPFT_CHECK_AS(InputError, fs::exists(o.synthetic),
                  "--run {} --subset {}: no {} (a ctcl run writes it when {} is among its "
                  "method.generation.subsets)",
                  o.run, o.subset, o.synthetic, o.subset);
    if (!name_given) o.name = fmt::format("n{}", o.subset);
    requested = o.subset;
  } else {
    o.synthetic = (fs::path(o.run) / "synthetic" / "synthetic.jsonl").string();
    DPFT_CHECK_AS(InputError, fs::exists(o.synthetic),
                  "--run {}: no synthetic/synthetic.jsonl (a method that writes synthetic "
                  "texts: ctcl, pe, aug-pe; or dpft generate --out into it)",
                  o.run);
    // N_syn as the method asked for it (ctcl: before the filter; pe / aug-pe: its
    // population), the x of the scaling plot.
    auto n = report::number_at(run_metrics, {"synthetic", "requested"});
    if (!n) n = report::number_at(run_metrics, {"pe", "num_synthetic"});
    if (n) requested = static_cast<int64_t>(*n);
  }
  if (o.work.empty()) o.work = (fs::path(o.run) / "eval_synthetic.work").string();
  return requested;
}

}  // namespace

nlohmann::json evaluate_synthetic(EvalSyntheticOptions o, bool name_given) {
  DPFT_CHECK_AS(ConfigError, !o.synthetic.empty() || !o.run.empty(),
                "eval-synthetic: give --synthetic FILE, or --run RUN_DIR (a finished run with "
                "synthetic/synthetic.jsonl)");
  DPFT_CHECK_AS(ConfigError, o.subset == 0 || !o.run.empty(),
                "--subset needs --run (a ctcl run with method.generation.subsets)");
  // --run: the run's set (its metrics.json records the result); N_syn where known.
  const fs::path metrics_file = o.run.empty() ? fs::path() : fs::path(o.run) / "metrics.json";
  const int64_t requested = o.run.empty() ? 0 : use_run_set(o, name_given);
  DPFT_CHECK_AS(ConfigError, !o.lm.on || !o.lm.tokenizer.empty(),
                "--lm needs --lm-tokenizer: a BERT WordPiece vocabulary (a directory with "
                "vocab.txt, e.g. ../shared/data/bert_base_uncased_vocab)");
  DPFT_CHECK_AS(ConfigError, !o.clf.on || (!o.clf.from.empty() && o.clf.labels.size() >= 2),
                "--classify needs --classifier-from (an encoder checkpoint, e.g. "
                "models/tiny-roberta) and --labels with at least two values, in class-id "
                "order");
  auto read = [&](const std::string& path, const std::string& column, int64_t max) {
    std::vector<std::string> t = data::column_texts(path, column, o.format);
    if (max > 0 && static_cast<int64_t>(t.size()) > max) t.resize(static_cast<size_t>(max));
    return t;
  };
  const std::vector<std::string> real = read(o.real, o.real_column, o.max_real),
                                 synth = read(o.synthetic, o.synthetic_column, o.max_synthetic);
  // Empty texts embed to one point: scored, they would measure the embedder, not the text.
  for (const auto& [name, texts] : {std::pair{"synthetic", &synth}, std::pair{"real", &real}}) {
    const auto blank = std::count_if(texts->begin(), texts->end(), [](const std::string& t) {
      return t.find_first_not_of(" \t\r\n") == std::string::npos;
    });
    DPFT_CHECK_AS(InputError, texts->empty() || blank < static_cast<int64_t>(texts->size()),
                  "eval-synthetic: every {} text ({} of them) is empty; there is nothing to "
                  "score (check --{}-column and the file)",
                  name, texts->size(), name);
    if (blank > 0)
      spdlog::warn(
          "eval-synthetic: {} of the {} {} texts are empty; they are scored as "
          "given (an empty generation is a failed one)",
          blank, texts->size(), name);
  }
  DPFT_CHECK_AS(InputError, static_cast<int64_t>(std::min(real.size(), synth.size())) > o.k,
                "eval-synthetic: {} real and {} synthetic texts; precision / recall with "
                "--k {} needs more than {} of each",
                real.size(), synth.size(), o.k, o.k);
  eval::Embedder em = eval::load_embedder(o.embedder, o.device, "dpft eval-synthetic");
  const torch::Tensor er = eval::embed_with_progress(em, real, o.batch, o.max_length, "embed real");
  const torch::Tensor es =
      eval::embed_with_progress(em, synth, o.batch, o.max_length, "embed synthetic");
  const eval::MauveResult m = eval::mauve(er, es, o.mauve);
  const eval::PrecisionRecall pr = eval::precision_recall(er, es, o.k);
  const double f = eval::fid(er, es);
  if (o.work.empty()) o.work = o.out.empty() ? "eval-synthetic.work" : o.out + ".work";
  nlohmann::json lm, clf;
  if (o.lm.on) lm = downstream_lm(o);
  if (o.clf.on) clf = downstream_classifier(o);
  nlohmann::json out = {
      {"real", {{"path", o.real}, {"texts", real.size()}}},
      {"synthetic", {{"path", o.synthetic}, {"texts", synth.size()}}},
      {"embedder", em.identity(o.max_length)},
      {"mauve",
       {{"mauve", m.mauve},
        {"frontier_integral", m.frontier_integral},
        {"buckets", m.buckets},
        {"pca_dims", m.pca_dims},
        {"seed", o.mauve.seed}}},
      {"fid", f},
      {"precision_recall", {{"k", pr.k}, {"precision", pr.precision}, {"recall", pr.recall}}},
      {"note",
       "an evaluation against the real texts as given, not a DP release (docs/outputs.md)"}};
  if (requested > 0) out["synthetic"]["requested"] = requested;
  if (o.subset > 0) out["synthetic"]["subset"] = true;  // not a table cell: Fig. 3's points
  if (!lm.is_null()) out["downstream_lm"] = lm;
  if (!clf.is_null()) out["downstream_classifier"] = clf;
  if (!o.out.empty()) write_file_atomic(o.out, out.dump(2) + "\n");
  if (!o.run.empty()) {
    if (!o.keep_work) {
      std::error_code ec;
      fs::remove_all(o.work, ec);
      for (const char* k : {"downstream_lm", "downstream_classifier"})
        if (out.contains(k)) out[k].erase("run_dir");
    }
    nlohmann::json run_metrics = read_json(metrics_file);  // as it is now
    run_metrics["synthetic_eval"][o.name] = out;
    write_json_atomic(metrics_file, run_metrics);
  }
  return out;
}

}  // namespace dpft
