#include "methods/audit/one_run_audit.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <unordered_set>

#include "core/eval/embed.hpp"
#include "core/grad/per_sample.hpp"
#include "core/model/checkpoint.hpp"
#include "core/privacy/audit_bound.hpp"
#include "core/tokenizer/load.hpp"
#include "core/train/setup.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "core/util/shape.hpp"
#include "core/util/system.hpp"
#include "data/table.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft::audit {

namespace fs = std::filesystem;

namespace {

// Private Evolution releases a synthetic set, no model: its canaries are texts in the private
// file, scored by the similarity of the nearest released synthetic text.
bool is_pe(const Spec& spec) {
  return spec.method.name == "pe" || spec.method.name == "aug-pe";
}

// pe, aug-pe and ctcl read one private corpus (no data.train_extra): the included canaries join
// a copy of the private file.
bool joins_private_file(const Spec& spec) {
  return is_pe(spec) || spec.method.name == "ctcl";
}

// A labelled ctcl (or pe) run's label columns and the public values of each (the method's
// resolved `label_columns` / `label_values`); empty when unlabelled.
struct MethodLabels {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> values;
};
MethodLabels method_labels(const Spec& spec) {
  MethodLabels l;
  const YAML::Node& o = spec.method.options;
  if (o["label_columns"]) l.columns = o["label_columns"].as<std::vector<std::string>>();
  if (o["label_values"]) l.values = o["label_values"].as<std::vector<std::vector<std::string>>>();
  DPFT_CHECK_AS(ConfigError, l.columns.size() == l.values.size(),
                "method.label_columns ({}) and method.label_values ({}) do not pair up",
                l.columns.size(), l.values.size());
  return l;
}

void check_auditable(const Spec& spec, const AuditOptions& o) {
  DPFT_CHECK_AS(ConfigError, o.canaries >= 2, "--canaries {}: need at least 2", o.canaries);
  DPFT_CHECK_AS(ConfigError, o.canary_tokens >= 1 && o.canary_tokens < spec.data.max_length,
                "--canary-tokens {}: must be in [1, data.max_length = {})", o.canary_tokens,
                spec.data.max_length);
  DPFT_CHECK_AS(ConfigError, o.confidence > 0 && o.confidence < 1,
                "--confidence {}: must be in (0, 1), e.g. 0.95", o.confidence);
  DPFT_CHECK_AS(ConfigError, o.guesses >= 0 && 2 * o.guesses <= o.canaries,
                "--guesses {}: k+ = k- = K needs 2 K <= --canaries ({})", o.guesses, o.canaries);
  DPFT_CHECK_AS(ConfigError, method_trains(spec),
                "dpft audit: method {} does not train on the private data; nothing to audit",
                spec.method.name);
  const std::string& m = spec.method.name;
  if (joins_private_file(spec)) {
    const DatasetSpec& t = spec.data.train;
    DPFT_CHECK_AS(
        ConfigError,
        t.label_column.empty() && t.prompt_column.empty() && t.rows.empty() && t.hash_split.empty(),
        "dpft audit: method {} is audited on a data.train without label_column, "
        "prompt_column, rows or hash_split (its canaries join a copy of the private "
        "file)",
        m);
    DPFT_CHECK_AS(ConfigError, !is_pe(spec) || method_labels(spec).columns.empty(),
                  "dpft audit: method {} is audited unlabelled (its canaries are texts of no "
                  "class); remove method.label_columns",
                  m);
    DPFT_CHECK_AS(ConfigError, o.score == AuditScore::kLoss,
                  "dpft audit: method {} is audited with --score loss (pe / aug-pe: the "
                  "similarity of the nearest released text; ctcl: the generator's loss)",
                  m);
  }
  DPFT_CHECK_AS(ConfigError, spec.data.task != Task::kMlm,
                "dpft audit: data.task mlm is not auditable yet (its loss masks random tokens, "
                "so one canary's score is not its own); audit lm, classification or seq2seq");
  const bool lm = spec.data.task == Task::kLm;
  DPFT_CHECK_AS(
      ConfigError,
      !lm || !model::load_model_config(train::resolve_model_dir(spec.model.path)).is_encoder(),
      "dpft audit: model.path {} is an encoder; canaries of data.task lm are audited "
      "on decoder language models only",
      spec.model.path);
  DPFT_CHECK_AS(ConfigError, lm || o.score == AuditScore::kLoss,
                "dpft audit --score gradient reads a decoder language model's per-example "
                "gradients; data.task {} is audited with --score loss",
                name_of(spec.data.task));
  DPFT_CHECK_AS(ConfigError, spec.data.train.num_samples == 0,
                "dpft audit: data.train.num_samples = {} subsamples the training set after the "
                "canaries are added, which would change which canaries are in; subsample the "
                "file beforehand and set data.train.num_samples: 0",
                spec.data.train.num_samples);
  DPFT_CHECK_AS(ConfigError, !spec.data.packing,
                "dpft audit: data.packing cuts documents into blocks, so one canary is no longer "
                "one example (the unit the guarantee protects); set data.packing: false");
  DPFT_CHECK_AS(ConfigError, !lm || spec.data.loss_on == LossOn::kAll,
                "dpft audit: data.loss_on: {}: the canaries are plain text; set data.loss_on: all",
                name_of(spec.data.loss_on));
}

// Regular tokens whose text is printable ASCII with a non-space character: canaries made of
// them are valid UTF-8 and survive a JSONL round trip unchanged.
std::vector<tok::TokenId> printable_pool(const tok::Tokenizer& t) {
  std::vector<tok::TokenId> pool;
  for (int64_t id = 0; id < t.vocab_size(); ++id) {
    const auto tid = static_cast<tok::TokenId>(id);
    if (t.is_special(tid)) continue;
    std::string s;
    try {
      s = t.decode({tid});
    } catch (const Error&) {
      continue;  // a hole in the id space
    }
    bool ok = !s.empty(), visible = false;
    for (unsigned char c : s) {
      ok &= c >= 0x20 && c <= 0x7e;
      visible |= c != ' ';
    }
    if (ok && visible) pool.push_back(tid);
  }
  return pool;
}

std::vector<std::string> make_canaries(const tok::Tokenizer& t, int64_t m, int64_t len,
                                       uint64_t seed) {
  const std::vector<tok::TokenId> pool = printable_pool(t);
  DPFT_CHECK_AS(InputError, pool.size() >= 100,
                "dpft audit: the tokenizer has only {} printable tokens; canaries need at least "
                "100",
                pool.size());
  // Distinct canaries must be plentiful: pool^len >= 4 m keeps the draws below ~2 m on average.
  DPFT_CHECK_AS(ConfigError,
                static_cast<double>(len) * std::log(static_cast<double>(pool.size())) >=
                    std::log(4.0 * static_cast<double>(m)),
                "--canaries {} with --canary-tokens {}: only {} printable tokens, too few distinct "
                "canaries of that length; use more --canary-tokens (or fewer --canaries)",
                m, len, pool.size());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  while (static_cast<int64_t>(out.size()) < m) {
    std::vector<tok::TokenId> ids;
    for (int64_t j = 0; j < len; ++j) ids.push_back(pool[pick(rng)]);
    std::string text = t.decode(ids);
    if (seen.insert(text).second) out.push_back(std::move(text));
  }
  return out;
}

// `n` distinct texts of `words` random lowercase words of 3 to 7 letters: text any tokenizer
// reads (an encoder's or a seq2seq model's), unlike any real row.
std::vector<std::string> random_word_texts(int64_t n, int64_t words, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> len(3, 7), letter(0, 25);
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  while (static_cast<int64_t>(out.size()) < n) {
    std::string t;
    for (int64_t w = 0; w < words; ++w) {
      if (w > 0) t += ' ';
      for (int c = len(rng); c > 0; --c) t += static_cast<char>('a' + letter(rng));
    }
    if (seen.insert(t).second) out.push_back(std::move(t));
  }
  return out;
}

// pe / aug-pe's canaries: n distinct non-empty texts drawn from the run's own initial population
// P_0 (Method::public_candidates: what the run will generate from the public prompts and
// spec.seed, before it reads a private row). An included canary is then a candidate's exact
// copy and votes for it: the worst case for the nearest-neighbour vote, so the strongest audit.
std::vector<std::string> candidate_canaries(const Spec& spec, int64_t n, std::mt19937_64& rng) {
  train::TrainInputs in = data::load_train_inputs(spec);
  std::vector<std::string> pool = configured_method(spec.method)->public_candidates(spec, in);
  std::unordered_set<std::string> seen;
  pool.erase(std::remove_if(pool.begin(), pool.end(),
                            [&](const std::string& t) {
                              return t.find_first_not_of(" \t\n") == std::string::npos ||
                                     !seen.insert(t).second;
                            }),
             pool.end());
  DPFT_CHECK_AS(ConfigError, static_cast<int64_t>(pool.size()) >= n,
                "dpft audit: method {}'s initial population has {} distinct texts, fewer than the "
                "{} canary rows; raise method.num_synthetic (or initial_variations), lower "
                "--canaries, or give --canary-file",
                spec.method.name, pool.size(), n);
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(static_cast<size_t>(n));
  return pool;
}

// Every canary's rows (rows_per_canary each) as JSON objects in canary_set()'s columns.
std::vector<std::vector<nlohmann::json>> make_canary_rows(const Spec& spec, const AuditOptions& o,
                                                          int64_t rows_per_canary) {
  const int64_t n = o.canaries * rows_per_canary;
  std::mt19937_64 rng(derive_seed(spec.seed, "audit-canary-rows"));
  std::vector<std::string> text;
  if (!o.canary_file.empty()) {
    text = data::column_texts(o.canary_file, "text");
    std::shuffle(text.begin(), text.end(), rng);
    DPFT_CHECK_AS(ConfigError, static_cast<int64_t>(text.size()) >= n,
                  "--canary-file {}: {} texts, fewer than the {} canary rows", o.canary_file,
                  text.size(), n);
    text.resize(static_cast<size_t>(n));
  } else if (is_pe(spec)) {
    text = candidate_canaries(spec, n, rng);
  } else if (spec.data.task == Task::kLm) {
    const tok::Tokenizer tok =
        tok::load_tokenizer(train::tokenizer_dir(spec, train::resolve_model_dir(spec.model.path)));
    text = make_canaries(tok, n, o.canary_tokens, derive_seed(spec.seed, "audit-canaries"));
  } else {
    text = random_word_texts(n, o.canary_tokens, rng);
  }
  // ctcl's labelled documents: each canary a random class among the public values.
  const MethodLabels classes = spec.method.name == "ctcl" ? method_labels(spec) : MethodLabels{};
  std::vector<std::string> labels;
  if (spec.data.task == Task::kClassification) {
    labels = !spec.data.labels.empty()
                 ? spec.data.labels
                 : model::load_model_config(train::resolve_model_dir(spec.model.path)).labels;
    DPFT_CHECK_AS(ConfigError, labels.size() >= 2,
                  "dpft audit: mislabelled canaries need the label set (data.labels, or the "
                  "model's); found {} labels",
                  labels.size());
  }
  const bool pair =
      spec.data.task == Task::kClassification && !spec.data.train.text_pair_column.empty();
  const bool source = spec.data.task == Task::kSeq2seq && !spec.data.train.prompt_column.empty();
  const std::vector<std::string> second =
      pair || source ? random_word_texts(n, o.canary_tokens, rng) : std::vector<std::string>{};
  std::uniform_int_distribution<size_t> pick_label(0, labels.empty() ? 0 : labels.size() - 1);
  std::vector<std::vector<nlohmann::json>> out(static_cast<size_t>(o.canaries));
  for (int64_t j = 0; j < n; ++j) {
    nlohmann::json row = {{"text", text[static_cast<size_t>(j)]}};
    if (!labels.empty()) row["label"] = labels[pick_label(rng)];
    if (pair) row["text_pair"] = second[static_cast<size_t>(j)];
    if (source) row["source"] = second[static_cast<size_t>(j)];
    for (size_t c = 0; c < classes.columns.size(); ++c) {
      const auto& v = classes.values[c];
      row[classes.columns[c]] = v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
    }
    if (spec.privacy.unit == privacy::PrivacyUnit::kUser)
      row["user"] = fmt::format("dpft-canary-{}", j / rows_per_canary);
    out[static_cast<size_t>(j / rows_per_canary)].push_back(std::move(row));
  }
  return out;
}

void write_rows(const fs::path& file, const std::vector<std::vector<nlohmann::json>>& canaries) {
  std::string s;
  for (const auto& c : canaries)
    for (const nlohmann::json& r : c) s += r.dump() + "\n";
  write_file_atomic(file, s);
}

// The canaries' data set in the task's columns (ctcl's label columns keep their names);
// `training`: with the user column at unit user.
DatasetSpec canary_set(const Spec& spec, const fs::path& file, bool training) {
  DatasetSpec d;
  d.path = file.string();
  d.format = "jsonl";
  d.text_column = "text";
  if (spec.data.task == Task::kClassification) {
    d.label_column = "label";
    if (!spec.data.train.text_pair_column.empty()) d.text_pair_column = "text_pair";
  }
  if (spec.data.task == Task::kSeq2seq && !joins_private_file(spec)) {
    if (!spec.data.train.prompt_column.empty()) d.prompt_column = "source";
    d.prompt = spec.data.train.prompt;
  }
  if (training && spec.privacy.unit == privacy::PrivacyUnit::kUser) d.user_column = "user";
  return d;
}

// The training file of pe, aug-pe and ctcl: the private rows (text, ctcl's label columns, and
// user at unit user) and then the included canary rows, as one JSONL file in the audit
// directory (the methods read one corpus).
DatasetSpec joined_training_set(const Spec& spec, const fs::path& file,
                                const std::vector<std::vector<nlohmann::json>>& included) {
  const data::Table t = data::read_table(spec.data.train.path, spec.data.train.format);
  const size_t text = t.column(spec.data.train.text_column);
  const bool user = spec.privacy.unit == privacy::PrivacyUnit::kUser;
  const size_t who = user ? t.column(spec.data.train.user_column) : 0;
  std::vector<std::pair<std::string, size_t>> labels;  // (column, its index in t)
  for (const std::string& c : method_labels(spec).columns) labels.emplace_back(c, t.column(c));
  std::string lines;
  for (const auto& row : t.rows) {
    nlohmann::json r = {{"text", row[text]}};
    for (const auto& [name, at] : labels) r[name] = row[at];
    if (user) r["user"] = row[who];
    lines += r.dump() + "\n";
  }
  for (const auto& c : included)
    for (const nlohmann::json& r : c) lines += r.dump() + "\n";
  write_file_atomic(file, lines);
  DatasetSpec d = spec.data.train;
  d.path = file.string();
  d.format = "jsonl";
  d.text_column = "text";
  if (user) d.user_column = "user";
  return d;
}

// The score of each canary row: the cosine similarity of the nearest text of the run's
// released synthetic set (synthetic/synthetic.jsonl), in the method's embedder's space.
std::vector<double> nearest_synthetic(const Spec& spec, const fs::path& run_dir,
                                      const std::vector<std::vector<nlohmann::json>>& canaries) {
  std::vector<std::string> synth, rows;
  for (const nlohmann::json& e : read_jsonl(run_dir / "synthetic" / "synthetic.jsonl"))
    synth.push_back(e.at("text").get<std::string>());
  DPFT_CHECK_AS(RuntimeError, !synth.empty(), "dpft audit: {} released no synthetic text",
                run_dir.string());
  for (const auto& c : canaries)
    for (const nlohmann::json& r : c) rows.push_back(r.at("text").get<std::string>());
  eval::Embedder em = eval::load_embedder(spec.method.options["embedder"].as<std::string>(),
                                          spec.device, "dpft audit");
  auto unit = [](const torch::Tensor& x) {  // (N, d) rows of L2 norm 1
    return x / x.norm(2, 1, true).clamp_min(1e-12);
  };
  const torch::Tensor c = unit(eval::embed_with_progress(em, rows, 32, 0, "audit canaries")),
                      s = unit(eval::embed_with_progress(em, synth, 32, 0, "audit synthetic"));
  const torch::Tensor best = std::get<0>(c.matmul(s.t()).max(1)).to(torch::kFloat64);  // (N)
  return std::vector<double>(best.data_ptr<double>(), best.data_ptr<double>() + best.numel());
}

// Per-canary means of per-row values (rows_per_canary consecutive rows each).
std::vector<double> per_canary(const std::vector<double>& rows, int64_t rows_per_canary) {
  std::vector<double> out(rows.size() / static_cast<size_t>(rows_per_canary), 0.0);
  for (size_t j = 0; j < rows.size(); ++j)
    out[j / static_cast<size_t>(rows_per_canary)] += rows[j] / static_cast<double>(rows_per_canary);
  return out;
}

// Per-canary losses of one model tag ("base" | "final") from the run's per_sample.jsonl.
std::vector<double> canary_losses(const fs::path& run_dir, const std::string& tag, int64_t m) {
  std::vector<double> loss(static_cast<size_t>(m), std::nan(""));
  for (const nlohmann::json& e : read_jsonl(run_dir / "per_sample.jsonl")) {
    if (e.value("model", "") != tag) continue;
    const int64_t i = e.at("index").get<int64_t>();
    DPFT_CHECK(i >= 0 && i < m, "audit: per_sample.jsonl index {} outside the {} canaries", i, m);
    loss[static_cast<size_t>(i)] = e.at("loss").get<double>();
  }
  for (int64_t i = 0; i < m; ++i)
    DPFT_CHECK(std::isfinite(loss[static_cast<size_t>(i)]),
               "audit: no finite {} loss for canary {} in {}/per_sample.jsonl", tag, i,
               run_dir.string());
  return loss;
}

// The white-box score of every canary (header, step 4): score_i = < theta_T - theta_0, -g_i > /
// ||g_i||. `a` is the audit run's spec (its eval set is every canary, in order); the released
// parameters are read back from the run's adapter (LoRA) or model directory, as a user of the
// release would read them.
std::vector<double> gradient_scores(const Spec& a, const fs::path& run_dir, int64_t m) {
  train::TrainInputs in = data::load_train_inputs(a);  // theta_0: base + seeded LoRA init
  in.model->eval();                                    // g_i without LoRA dropout
  DPFT_CHECK(in.eval.size() == m, "audit: {} of the {} canaries tokenised", in.eval.size(), m);
  model::CausalLM released =
      model::load_checkpoint(model::saves_adapter(in.peft.kind) ? in.model_dir : run_dir / "model");
  if (model::saves_adapter(in.peft.kind)) model::load_adapter(released, run_dir / "adapter");
  const auto named = released->named_parameters();
  std::vector<torch::Tensor> delta;  // theta_T - theta_0 per trainable parameter, flattened
  for (const auto& [name, p0] : model::trainable_parameters(in.model)) {
    const torch::Tensor* pt = named.find(name);
    DPFT_CHECK(pt != nullptr && pt->sizes() == p0.sizes(),
               "audit: the released parameters in {} have no {} of shape {}", run_dir.string(),
               name, shape_str(p0.sizes()));
    delta.push_back(
        (pt->detach().to(p0.device(), torch::kFloat64) - p0.detach().to(torch::kFloat64))
            .reshape({-1}));
  }
  const torch::Tensor d = torch::cat(delta);  // (p)
  grad::PerSampleGrads engine(in.model);
  // Canaries per batch: the spec's micro batch, fewer when (B, p) in float32 would pass 256 MB.
  const int64_t per_batch = std::clamp<int64_t>(
      (int64_t{256} << 20) / (4 * std::max<int64_t>(engine.dim(), 1)), 1, a.train.micro_batch_size);
  std::vector<double> score(static_cast<size_t>(m), std::nan(""));
  const int64_t pad = in.pad_id;
  for (int64_t lo = 0; lo < m; lo += per_batch) {
    std::vector<int64_t> rows;
    for (int64_t r = lo; r < std::min(m, lo + per_batch); ++r) rows.push_back(r);
    const lm::LmBatch b = lm::collate(in.eval, rows, pad);
    engine.compute(b);
    const torch::Tensor g = engine.matrix().to(torch::kFloat64);  // (B, p)
    const torch::Tensor norm = g.norm(2, 1), dot = -g.matmul(d);  // (B), (B)
    const torch::Tensor s =
        torch::where(norm > 0, dot / norm.clamp_min(1e-300), torch::zeros_like(dot));
    for (size_t k = 0; k < rows.size(); ++k)
      score[static_cast<size_t>(b.index[k])] = s[static_cast<int64_t>(k)].item<double>();
  }
  engine.release();
  for (int64_t i = 0; i < m; ++i)
    DPFT_CHECK(std::isfinite(score[static_cast<size_t>(i)]),
               "audit: no finite gradient score for canary {}", i);
  return score;
}

}  // namespace

std::vector<int64_t> guess_grid(int64_t m) {
  std::vector<int64_t> ks;
  for (double f : {0.01, 0.02, 0.05, 0.1, 0.2, 0.5}) {
    int64_t k = std::clamp<int64_t>(std::llround(f * static_cast<double>(m)), 1, m / 2);
    if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  }
  return ks;
}

AuditResult run_audit(const Spec& spec, const AuditOptions& opts) {
  AuditOptions o = opts;
  if (o.canary_tokens == 0) o.canary_tokens = std::min<int64_t>(32, spec.data.max_length / 2);
  const bool user = spec.privacy.unit == privacy::PrivacyUnit::kUser;
  if (o.canary_rows == 0)
    o.canary_rows = user ? std::min<int64_t>(4, spec.privacy.max_examples_per_user) : 1;
  DPFT_CHECK_AS(ConfigError,
                o.canary_rows == 1 || (user && o.canary_rows >= 1 &&
                                       o.canary_rows <= spec.privacy.max_examples_per_user),
                "--canary-rows {}: a canary is one row unless privacy.unit is user, and a canary "
                "user has 1 to privacy.max_examples_per_user ({}) rows",
                o.canary_rows, spec.privacy.max_examples_per_user);
  check_auditable(spec, o);
  const fs::path dir =
      !o.out_dir.empty()
          ? fs::path(o.out_dir)
          : fs::path(spec.output.dir) / "audit" /
                fmt::format("{}-{}-s{}", spec.name, local_stamp_now(), spec.seed);
  DPFT_CHECK_AS(ConfigError, !fs::exists(dir) || (fs::is_directory(dir) && fs::is_empty(dir)),
                "dpft audit: {} exists and is not empty; give a new --out", dir.string());
  fs::create_directories(dir);

  // Lines 1-2 of the paper's Algorithm 1: canaries, and S_i uniform in {-1, +1}.
  const int64_t per = o.canary_rows;
  const std::vector<std::vector<nlohmann::json>> canaries = make_canary_rows(spec, o, per);
  std::mt19937_64 coin(derive_seed(spec.seed, "audit-inclusion"));
  std::vector<int> s(canaries.size());
  std::vector<std::vector<nlohmann::json>> included;
  for (size_t i = 0; i < canaries.size(); ++i) {
    s[i] = (coin() >> 63) ? 1 : -1;
    if (s[i] == 1) included.push_back(canaries[i]);
  }
  write_rows(dir / "canaries.jsonl", canaries);
  write_rows(dir / "canaries_in.jsonl", included);
  std::string truth;
  for (int x : s) truth += x == 1 ? "1\n" : "0\n";
  write_file_atomic(dir / "canaries_included.txt", truth);  // the auditor's secret, line i

  // Line 3: one training run on the private data plus the included canaries; the eval set is
  // every canary row, scored by the base and the trained model (per_sample.jsonl).
  Spec a = spec;
  a.name = spec.name + "-audit";
  if (joins_private_file(spec))
    a.data.train = joined_training_set(spec, dir / "train_with_canaries.jsonl", included);
  else if (!included.empty())
    a.data.train_extra.push_back(canary_set(spec, dir / "canaries_in.jsonl", true));
  if (is_pe(spec)) {
    // Measured power without noise (docs/privacy.md, Empirical audit): candidate canaries
    // released by the first selection, yes; canaries a variation must find, none.
    const YAML::Node& mo = spec.method.options;
    const bool first_selection =
        mo["iterations"].as<int64_t>() == 1 && mo["output"].as<std::string>() == "selected";
    if (!o.canary_file.empty() || !first_selection)
      spdlog::warn(
          "audit of {}: {} showed no power in dpft's small tests (a bound of 0.0 without "
          "noise); a 0.0 here is not evidence of privacy. The audit has power on candidate "
          "canaries (no --canary-file) with method.iterations: 1 and method.output: selected "
          "(docs/privacy.md, Empirical audit)",
          spec.method.name,
          o.canary_file.empty() ? "canaries released only through later iterations' variations"
                                : "public canary texts");
  } else {
    a.data.eval = canary_set(spec, dir / "canaries.jsonl", false);
  }
  a.data.eval_sets.clear();
  a.eval.max_samples = 0;
  a.eval.every = 0;
  a.eval.per_sample = true;
  a.output.non_private_stats = true;  // the eval set holds training rows (the included canaries)
  a.output.save_model = o.score == AuditScore::kGradient;  // the white-box score reads it
  a.output.checkpoint_every = 0;
  RunOptions ro;
  ro.out_dir = (dir / "runs").string();
  ro.command_line = o.command_line;
  spdlog::info("audit: {} canaries of {} tokens, {} included; training {} ({})", canaries.size(),
               o.canary_tokens, included.size(), spec.method.name, spec.name);
  RunResult run = run_method(a, ro);
  DPFT_CHECK_AS(RuntimeError, run.status == "ok",
                "dpft audit: the training run ended '{}' ({}); run the audit again", run.status,
                run.run_dir);
  const nlohmann::json metrics =
      nlohmann::json::parse(read_file(fs::path(run.run_dir) / "metrics.json"));

  // Lines 4-6: scores, guesses, and the bound.
  std::vector<double> row_score;
  const int64_t rows = o.canaries * per;
  if (is_pe(spec)) {
    row_score = nearest_synthetic(spec, run.run_dir, canaries);
  } else if (o.score == AuditScore::kGradient) {
    row_score = gradient_scores(a, run.run_dir, rows);
  } else {
    const std::vector<double> base = canary_losses(run.run_dir, "base", rows),
                              final = canary_losses(run.run_dir, "final", rows);
    for (size_t i = 0; i < base.size(); ++i) row_score.push_back(base[i] - final[i]);
  }
  const std::vector<double> score = per_canary(row_score, per);
  std::string lines;
  for (size_t i = 0; i < score.size(); ++i)
    lines += nlohmann::json({{"index", i}, {"score", score[i]}}).dump() + "\n";
  write_file_atomic(dir / "scores.jsonl", lines);
  const std::vector<int64_t> ks = o.guesses > 0 ? std::vector<int64_t>{o.guesses}
                                                : guess_grid(o.canaries);
  const double beta = (1 - o.confidence) / static_cast<double>(ks.size());
  const double delta = spec.privacy.delta;
  nlohmann::json tests = nlohmann::json::array();
  double best = 0;
  for (int64_t k : ks) {
    const std::vector<int> t = privacy::audit_guesses(score, k, k);
    privacy::AuditCounts c{o.canaries, 2 * k, 0};
    for (size_t i = 0; i < t.size(); ++i) c.correct += (t[i] != 0 && t[i] == s[i]);
    const double lb = privacy::audit_epsilon_lower_bound(c, delta, beta);
    best = std::max(best, lb);
    tests.push_back({{"k_plus", k}, {"k_minus", k}, {"guesses", c.guesses},
                     {"correct", c.correct}, {"eps_lower_bound", lb}});
  }
  double in_mean = 0, out_mean = 0;
  int64_t n_in = 0;
  for (size_t i = 0; i < score.size(); ++i) {
    (s[i] == 1 ? in_mean : out_mean) += score[i];
    n_in += s[i] == 1;
  }
  in_mean /= std::max<int64_t>(n_in, 1);
  out_mean /= std::max<int64_t>(o.canaries - n_in, 1);
  const nlohmann::json reported = metrics["privacy"].value("epsilon", nlohmann::json());
  AuditResult r;
  r.dir = dir.string();
  r.violation = reported.is_number() && best > reported.get<double>() + 1e-9;
  r.report = {
      {"schema", "dpft.audit/1"},
      {"method", spec.method.name},
      {"spec", spec.name},
      {"seed", spec.seed},
      {"canaries", o.canaries},
      {"canary_tokens", o.canary_tokens},
      {"canary_rows", o.canary_rows},
      {"task", name_of(spec.data.task)},
      {"unit", privacy::name_of(spec.privacy.unit)},
      {"included", n_in},
      {"score", enum_name(o.score, kAuditScoreNames)},
      {"score_formula", is_pe(spec) ? "cosine similarity of the nearest released synthetic text"
                        : spec.method.name == "ctcl"
                            ? "base loss - final loss of the document given its bin's condition"
                        : o.score == AuditScore::kGradient
                            ? "<theta_T - theta_0, -g_i> / ||g_i||, g_i at theta_0"
                            : "base loss - final loss"},
      {"score_mean_included", in_mean},
      {"score_mean_excluded", out_mean},
      {"confidence", o.confidence},
      {"delta", delta},
      {"bonferroni", ks.size()},
      {"tests", tests},
      {"eps_lower_bound", best},
      {"reported_epsilon", reported},
      {"violation", r.violation},
      {"run_dir", run.run_dir}};
  write_json_atomic(dir / "audit.json", r.report);
  return r;
}

}  // namespace dpft::audit
