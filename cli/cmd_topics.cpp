// `dpft topics build|assign`: CTCL's universal topic model (paper 004, Sections 3.2-3.3;
// core/topics/topic_model.hpp).
//   build  --corpus F... --model ENCODER --out DIR: embed the public documents, spherical
//          k-means into --topics topics (faiss), 10 c-TF-IDF keywords per topic.
//   assign --topics DIR --input F --out F.jsonl|.csv: each document's nearest topic, with the
//          encoder the model was built with (its weights' hash is checked).
//   pairs  --topics DIR --corpus F... --doc-type T... --out F.csv: CTCL-Generator's pretraining
//          pairs (Section 3.2) from public documents: condition "Document Type: T\nKeywords:
//          ..." (the document's own top TF-IDF words, then its topic's keywords) -> document.
// Neither is a DP release: build reads public text; assign labels its input as given, and
// its output is as private as the input (methods/ctcl makes the DP histogram of it).
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

#include "cli/app.hpp"
#include "core/eval/embed.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"
#include "data/table.hpp"
#include "methods/ctcl/synthesis.hpp"

namespace dpft {

namespace {

std::string rate(size_t n, double secs) {
  return fmt::format("{:.0f} documents/s", secs > 0 ? static_cast<double>(n) / secs : 0.0);
}

void register_build(CLI::App* topics, CliContext& ctx) {
  struct Build {
    std::vector<std::string> corpus, column{"text"};
    std::string model, out, format = "auto", device = "cpu";
    int64_t keywords = 10, batch = 32;
    topics::KMeansOptions kmeans;
    size_t min_words = 1, max_length = 128;
  };
  auto b = std::make_shared<Build>();
  CLI::App* build = topics->add_subcommand(
      "build", "embed public documents, cluster them into topics, 10 keywords per topic");
  build
      ->add_option(
          "--corpus", b->corpus,
          "public text files (.txt one document per line, .csv, .tsv, .jsonl, .json); repeatable")
      ->required();
  build
      ->add_option("--column", b->column,
                   "text column: one for every corpus, or one per --corpus in order")
      ->capture_default_str();
  build->add_option("--format", b->format, "input format: auto | csv | tsv | jsonl | text")
      ->capture_default_str();
  build->add_option("--model", b->model, "encoder checkpoint (bert / roberta) for the embeddings")
      ->required();
  build->add_option("--out", b->out, "output directory (topic_model.safetensors, topics.jsonl)")
      ->required();
  build->add_option("--topics", b->kmeans.k, "number of topics (k-means k)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  build->add_option("--keywords", b->keywords, "keywords per topic (c-TF-IDF)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  build
      ->add_option("--min-words", b->min_words,
                   "documents with fewer whitespace-separated words are left out (headings, "
                   "blank lines)")
      ->capture_default_str();
  build
      ->add_option("--max-length", b->max_length,
                   "tokens embedded per document, specials included (0: the model's positions)")
      ->capture_default_str();
  build->add_option("--iterations", b->kmeans.iterations, "k-means iterations")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  build
      ->add_option("--redo", b->kmeans.redo, "k-means runs from different seeds (the best is kept)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  build->add_option("--seed", b->kmeans.seed, "k-means seed")->capture_default_str();
  build->add_option("--batch", b->batch, "documents per encoder forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  build->add_option("--device", b->device, "cpu | cuda | cuda:N")->capture_default_str();
  build->callback([b, &ctx] {
    ctx.action = [b] {
      DPFT_CHECK_AS(ConfigError, topics::have_faiss(),
                    "topics build: this dpft was built without faiss (k-means); install "
                    "libfaiss-dev (scripts/setup.sh) and rebuild");
      const data::Documents docs =
          data::read_documents(b->corpus, b->column, b->format, b->min_words, "topics build");
      eval::Embedder em = eval::load_embedder(b->model, b->device, "dpft topics build");
      double embed_s = 0;
      const torch::Tensor x =
          eval::embed_with_progress(em, docs.texts, b->batch, b->max_length, "embed", &embed_s);
      topics::TopicModel m = topics::build_topic_model(docs.texts, x, b->kmeans, b->keywords);
      m.embedder = em.identity(b->max_length);
      m.embedder["abs_path"] = std::filesystem::absolute(b->model).lexically_normal().string();
      m.build["corpus"] = docs.sources;
      m.build["min_words"] = b->min_words;
      m.build["embed_seconds"] = embed_s;
      topics::save(m, b->out);
      std::cout << fmt::format("wrote {}: {}, embedding {}, k-means {:.1f} s\n", b->out,
                               topics::describe(m), rate(docs.texts.size(), embed_s),
                               m.build["kmeans_seconds"].get<double>());
      for (int64_t c = 0; c < std::min<int64_t>(m.num_topics(), 10); ++c)
        std::cout << fmt::format("  topic {} ({} docs): {}\n", c, m.sizes[static_cast<size_t>(c)],
                                 m.keyword_line(c));
      if (m.num_topics() > 10)
        std::cout << fmt::format("  ... all topics in {}/topics.jsonl\n", b->out);
      return 0;
    };
  });
}

void register_pairs(CLI::App* topics, CliContext& ctx) {
  struct Pairs {
    std::string topics, out, model, format = "auto", device = "cpu";
    std::vector<std::string> corpus, column = {"text"}, doc_type;
    int64_t own = 5, keywords = 10, batch = 32;
    size_t min_words = 8;
    bool empty_condition = false;
  };
  auto p = std::make_shared<Pairs>();
  CLI::App* pairs = topics->add_subcommand(
      "pairs",
      "CTCL-Generator pretraining pairs from public documents: (Document Type + Keywords) -> "
      "document, as a CSV with columns condition, text");
  pairs->add_option("--topics", p->topics, "topic model directory (dpft topics build --out)")
      ->required();
  pairs->add_option("--corpus", p->corpus, "public document files (.txt one per line, .csv, .tsv, .jsonl)")
      ->required();
  pairs->add_option("--column", p->column, "text column: one for all corpora, or one per corpus")
      ->capture_default_str();
  pairs->add_option("--doc-type", p->doc_type,
                    "the document type of each corpus (one per corpus), e.g. \"Movie review\"");
  pairs->add_flag("--empty-condition", p->empty_condition,
                  "every condition empty: the same documents for an unconditional twin of the "
                  "generator (CTCL Table 5's generator without condition pretraining)");
  pairs->add_option("--out", p->out, "output .csv (condition, text)")->required();
  pairs->add_option("--own-keywords", p->own,
                    "the document's own top TF-IDF words first (then its topic's)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  pairs->add_option("--keywords", p->keywords, "keywords per condition")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  pairs->add_option("--min-words", p->min_words, "documents with fewer words are left out")
      ->capture_default_str();
  pairs->add_option("--format", p->format, "input format: auto | csv | tsv | jsonl | text")
      ->capture_default_str();
  pairs->add_option("--model", p->model,
                    "the encoder, if not at the path the topic model recorded (its weights "
                    "must be the same)");
  pairs->add_option("--batch", p->batch, "documents per encoder forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  pairs->add_option("--device", p->device, "cpu | cuda | cuda:N")->capture_default_str();
  pairs->callback([p, &ctx] {
    ctx.action = [p] {
      DPFT_CHECK_AS(ConfigError, p->empty_condition || p->doc_type.size() == p->corpus.size(),
                    "topics pairs: {} --doc-type values for {} --corpus files: give one per corpus",
                    p->doc_type.size(), p->corpus.size());
      DPFT_CHECK_AS(ConfigError, std::filesystem::path(p->out).extension() == ".csv",
                    "--out {}: use a .csv file name", p->out);
      DPFT_CHECK_AS(ConfigError, p->own <= p->keywords,
                    "--own-keywords {} exceeds --keywords {}", p->own, p->keywords);
      const topics::TopicModel m = topics::load(p->topics);
      const data::Documents docs =
          data::read_documents(p->corpus, p->column, p->format, p->min_words, "topics pairs");
      // The conditions (none to make with --empty-condition: nothing embedded or counted).
      std::vector<std::string> cond(docs.texts.size());
      if (!p->empty_condition) {
        eval::Embedder em = eval::load_embedder_matching(m.embedder, p->model, p->device,
                                                         "topics pairs: topic model " + p->topics,
                                                         "pass --model with that encoder");
        const torch::Tensor x = eval::embed_with_progress(
            em, docs.texts, p->batch, m.embedder.value("max_length", size_t{0}), "embed");
        const torch::Tensor idx = topics::nearest(x, m.centroids).first.contiguous();
        const std::vector<int64_t> topic(idx.data_ptr<int64_t>(),
                                         idx.data_ptr<int64_t>() + idx.numel());
        std::vector<std::string> types;
        for (const size_t c : docs.corpus) types.push_back(p->doc_type[c]);
        cond = ctcl::pretraining_conditions(m, docs.texts, topic, types, p->own, p->keywords);
      }
      std::string csv = "condition,text\n";
      for (size_t i = 0; i < docs.texts.size(); ++i)
        csv += csv_quote(cond[i]) + "," + csv_quote(docs.texts[i]) + "\n";
      write_file_atomic(p->out, csv);
      std::cout << fmt::format("wrote {}: {} (condition, document) pairs from {} corpora\n", p->out,
                               docs.texts.size(), p->corpus.size());
      return 0;
    };
  });
}

void register_assign(CLI::App* topics, CliContext& ctx) {
  struct Assign {
    std::string topics, input, out, model, column = "text", format = "auto", device = "cpu";
    int64_t batch = 32;
  };
  auto a = std::make_shared<Assign>();
  CLI::App* assign = topics->add_subcommand(
      "assign", "each document's nearest topic (the encoder the topic model was built with)");
  assign->add_option("--topics", a->topics, "topic model directory (dpft topics build --out)")
      ->required();
  assign->add_option("--input", a->input, "documents: .txt (one per line), .csv, .tsv, .jsonl")
      ->required();
  assign->add_option("--out", a->out, "output: .jsonl ({index, topic, similarity}) or .csv")
      ->required();
  assign->add_option("--column", a->column, "text column")->capture_default_str();
  assign->add_option("--format", a->format, "input format: auto | csv | tsv | jsonl | text")
      ->capture_default_str();
  assign->add_option("--model", a->model,
                     "the encoder, if not at the path the topic model recorded (its weights "
                     "must be the same)");
  assign->add_option("--batch", a->batch, "documents per encoder forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  assign->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  assign->callback([a, &ctx] {
    ctx.action = [a] {
      const std::string ext = std::filesystem::path(a->out).extension().string();
      DPFT_CHECK_AS(ConfigError, ext == ".jsonl" || ext == ".csv",
                    "--out {}: use a .jsonl or .csv file name", a->out);
      const topics::TopicModel m = topics::load(a->topics);
      const size_t max_length = m.embedder.value("max_length", size_t{0});
      eval::Embedder em = eval::load_embedder_matching(m.embedder, a->model, a->device,
                                                       "topics assign: topic model " + a->topics,
                                                       "pass --model with that encoder");
      const auto texts = data::column_texts(a->input, a->column, a->format);
      double secs = 0;
      const torch::Tensor x =
          eval::embed_with_progress(em, texts, a->batch, max_length, "embed", &secs);
      const auto [idx, sim] = topics::nearest(x, m.centroids);
      std::string lines = ext == ".csv" ? "index,topic,similarity\n" : "";
      std::vector<int64_t> hist(static_cast<size_t>(m.num_topics()), 0);
      for (int64_t i = 0; i < idx.numel(); ++i) {
        const int64_t t = idx[i].item<int64_t>();
        const double s = sim[i].item<double>();
        ++hist[static_cast<size_t>(t)];
        lines += ext == ".csv"
                     ? fmt::format("{},{},{:.6f}\n", i, t, s)
                     : nlohmann::json{{"index", i}, {"topic", t}, {"similarity", s}}.dump() + "\n";
      }
      write_file_atomic(a->out, lines);
      const int64_t used = std::count_if(hist.begin(), hist.end(), [](int64_t c) { return c > 0; });
      std::cout << fmt::format(
          "wrote {} ({} documents in {} of {} topics, {}; not a DP release: the topics of the "
          "input as given)\n",
          a->out, texts.size(), used, m.num_topics(), rate(texts.size(), secs));
      return 0;
    };
  });
}

}  // namespace

void register_topics(CLI::App& app, CliContext& ctx) {
  CLI::App* topics = app.add_subcommand(
      "topics", "CTCL's topic model: build one from public text, assign documents to topics");
  topics->require_subcommand(1);
  register_build(topics, ctx);
  register_pairs(topics, ctx);
  register_assign(topics, ctx);
}

}  // namespace dpft
