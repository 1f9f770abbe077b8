// CTCL's topic model (core/topics, cli/cmd_topics.cpp): keyword tokens, c-TF-IDF against the
// formula worked by hand, faiss k-means on separable clusters, faiss nearest == the matmul
// reference, save/load, and `dpft topics build|assign` end to end.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/model/safetensors.hpp"
#include "core/topics/topic_model.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/table.hpp"
#include "test_util.hpp"

using namespace dpft;
namespace fs = std::filesystem;

TEST_CASE("topic keyword tokens: lower-cased word runs, letters required, stop words out",
          "[topics]") {
  using V = std::vector<std::string>;
  CHECK(topics::keyword_tokens("The Émile_2 said: don't 42 <unk> Naïve-CAFÉ x 3rd") ==
        V{"émile_2", "said", "don", "naïve", "café", "3rd"});
  CHECK(topics::keyword_tokens("").empty());
  CHECK(topics::keyword_tokens("of the and a I").empty());
  CHECK(topics::is_stop_word("which"));
  CHECK_FALSE(topics::is_stop_word("lobster"));
}

TEST_CASE("c-TF-IDF keywords follow BERTopic's formula (worked by hand)", "[topics]") {
  // Topic 0: apple x3, banana, cherry; topic 1: banana, dog x3, elephant; topic 2: empty.
  const std::vector<std::string> docs = {"apple apple banana", "Apple, cherry.", "banana dog",
                                         "dog dog elephant"};
  const std::vector<int64_t> topic = {0, 0, 1, 1};
  const auto kw = topics::ctfidf_keywords(docs, topic, 3, 2);
  REQUIRE(kw.size() == 3);
  // A = (5 + 5 + 0) / 3 words per topic; f: apple 3, banana 2, cherry 1, dog 3, elephant 1.
  const double A = 10.0 / 3.0;
  auto W = [&](double tf, double total, double f) { return tf / total * std::log(1 + A / f); };
  REQUIRE(kw[0].size() == 2);
  CHECK(kw[0][0].word == "apple");
  CHECK(kw[0][0].weight == Approx(W(3, 5, 3)).epsilon(1e-12));
  CHECK(kw[0][1].word == "cherry");  // W(1, 5, 1) > W(1, 5, 2) of banana
  CHECK(kw[0][1].weight == Approx(W(1, 5, 1)).epsilon(1e-12));
  REQUIRE(kw[1].size() == 2);
  CHECK(kw[1][0].word == "dog");
  CHECK(kw[1][1].word == "elephant");
  CHECK(kw[2].empty());
  CHECK_THROWS_AS(topics::ctfidf_keywords(docs, {0, 0, 1, 3}, 3), RuntimeError);
}

namespace {
// n points around each of `centers` unit vectors (noise `spread`), unit rows; labels out.
torch::Tensor topics_blobs(const torch::Tensor& centers, int64_t n, double spread,
                           std::vector<int64_t>& label) {
  std::vector<torch::Tensor> parts;
  for (int64_t c = 0; c < centers.size(0); ++c) {
    parts.push_back(centers[c].unsqueeze(0) + spread * torch::randn({n, centers.size(1)}));
    for (int64_t i = 0; i < n; ++i) label.push_back(c);
  }
  torch::Tensor x = torch::cat(parts);
  return x / x.norm(2, 1, true);
}
}  // namespace

TEST_CASE("faiss k-means recovers separable clusters; nearest equals the matmul reference",
          "[topics]") {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({500, 16});
  torch::Tensor c = torch::randn({37, 16});
  c = c / c.norm(2, 1, true);
  const auto [i1, s1] = topics::nearest(x, c);
  const auto [i0, s0] = topics::nearest_reference(x, c);
  CHECK(torch::equal(i1, i0));
  CHECK((s1 - s0).abs().max().item<double>() < 1e-5);
  CHECK(topics::nearest(x.slice(0, 0, 0), c).first.numel() == 0);
  CHECK_THROWS_AS(topics::nearest(x, torch::randn({4, 8})), InputError);

  if (!topics::have_faiss()) {
    WARN("skipped: built without faiss");
    CHECK_THROWS_AS(topics::kmeans(x, {}), ConfigError);
    return;
  }
  torch::Tensor centers = torch::randn({4, 32});
  centers = centers / centers.norm(2, 1, true);
  std::vector<int64_t> label;
  const torch::Tensor pts = topics_blobs(centers, 60, 0.05, label);
  const torch::Tensor cent = topics::kmeans(pts, {4, 20, 2, 7});
  REQUIRE(cent.sizes() == torch::IntArrayRef({4, 32}));
  CHECK((cent.norm(2, 1) - 1).abs().max().item<double>() < 1e-4);
  const auto [idx, sim] = topics::nearest(pts, cent);
  // Each true cluster lands in one topic, and different clusters in different topics.
  std::map<int64_t, std::set<int64_t>> topics_of;
  for (size_t i = 0; i < label.size(); ++i)
    topics_of[label[i]].insert(idx[static_cast<int64_t>(i)].item<int64_t>());
  std::set<int64_t> used;
  for (const auto& [l, ts] : topics_of) {
    CHECK(ts.size() == 1);
    used.insert(*ts.begin());
  }
  CHECK(used.size() == 4);
  CHECK(sim.min().item<double>() > 0.8);
  // Same seed, same centroids.
  CHECK(torch::equal(topics::kmeans(pts, {4, 20, 2, 7}), cent));
  CHECK_THROWS_AS(topics::kmeans(pts.slice(0, 0, 3), {4}), ConfigError);
}

TEST_CASE("a topic model saves and loads; a wrong file is refused by name", "[topics]") {
  test::TempDir tmp;
  topics::TopicModel m;
  m.centroids = torch::randn({3, 5});
  m.keywords = {{{"a1", 0.5}, {"a2", 0.25}}, {}, {{"c1", 1.0}}};
  m.sizes = {4, 0, 7};
  m.embedder = {{"path", "x"}, {"params_sha256", "abc"}};
  m.build = {{"documents", 11}};
  topics::save(m, tmp.path / "m");
  const topics::TopicModel r = topics::load(tmp.path / "m");
  CHECK(torch::equal(r.centroids, m.centroids));
  CHECK(r.sizes == m.sizes);
  REQUIRE(r.keywords.size() == 3);
  CHECK(r.keywords[0][1].word == "a2");
  CHECK(r.keywords[0][1].weight == 0.25);
  CHECK(r.keywords[1].empty());
  CHECK(r.keyword_line(0) == "a1, a2");
  CHECK(r.embedder == m.embedder);
  CHECK(r.build == m.build);
  CHECK(read_file(tmp.path / "m" / "topics.jsonl").find("\"keywords\":[\"c1\"]") !=
        std::string::npos);
  CHECK_THROWS_AS(topics::load(tmp.path / "none"), InputError);
  fs::create_directories(tmp.path / "bad");
  model::save_safetensors(tmp.path / "bad" / "topic_model.safetensors",
                          {{"centroids", torch::zeros({2, 2})}}, {{"format", "other"}});
  CHECK_THROWS_AS(topics::load(tmp.path / "bad"), InputError);
  // Zero topics (a SIGSEGV later in `topics assign`) and NaN centroids ("record 0 is in bin -1"
  // later) are refused when the file is read, naming it.
  const auto good = model::SafetensorsFile::open(tmp.path / "m" / "topic_model.safetensors");
  const std::map<std::string, std::string> meta = good->metadata();
  for (const torch::Tensor& c :
       {torch::zeros({0, 5}), torch::full({3, 5}, std::nan("")), torch::zeros({5})}) {
    CAPTURE(c.sizes());
    fs::create_directories(tmp.path / "broken");
    model::save_safetensors(tmp.path / "broken" / "topic_model.safetensors", {{"centroids", c}},
                            meta);
    CHECK_THROWS_WITH(topics::load(tmp.path / "broken"),
                      Catch::Matchers::Contains("topic_model.safetensors") &&
                          Catch::Matchers::Contains("rebuild the topic model"));
  }
  m.sizes.pop_back();
  CHECK_THROWS_AS(topics::save(m, tmp.path / "m2"), RuntimeError);
}

TEST_CASE("dpft topics build and assign: sizes equal the assignment of the build corpus",
          "[topics][cli]") {
  test::TempDir tmp;
  const std::string model = (fs::path(DPFT_SOURCE_DIR) / "models" / "tiny-roberta").string();
  std::string corpus = "text\n";
  const char* themes[] = {"the river flows past the old mill and the stone bridge",
                          "the team won the match in the final minute of the game",
                          "the senate passed the budget bill after a long debate",
                          "the bakery sells fresh bread, cakes and sweet pastries"};
  for (int i = 0; i < 40; ++i)
    corpus += fmt::format("\"{} number {} {}\"\n", themes[i % 4], i, i % 3 == 0 ? "today" : "");
  corpus += "\"short\"\n";  // fewer than --min-words 3: left out
  const fs::path cf = tmp.write("corpus.csv", corpus);
  const std::string out = (tmp.path / "tm").string();
  std::string printed;
  if (!topics::have_faiss()) {  // built without faiss: build is refused with a message
    CHECK(test::cli({"topics", "build", "--corpus", cf.string(), "--model", model, "--out", out}) ==
          2);
    return;
  }
  REQUIRE(test::cli({"topics", "build", "--corpus", cf.string(), "--model", model, "--topics", "4",
                     "--min-words", "3", "--seed", "1", "--out", out},
                    &printed) == 0);
  CHECK(printed.find("4 topics from 40 documents") != std::string::npos);
  const topics::TopicModel m = topics::load(out);
  REQUIRE(m.num_topics() == 4);
  CHECK(m.centroids.size(1) == 128);
  int64_t total = 0;
  for (int64_t s : m.sizes) total += s;
  CHECK(total == 40);
  CHECK(m.build["documents"] == 40);
  CHECK(m.embedder["model_type"] == "roberta");
  CHECK(m.embedder["params_sha256"].get<std::string>().size() == 64);
  for (const auto& ks : m.keywords)
    for (const auto& k : ks) CHECK_FALSE(topics::is_stop_word(k.word));

  // Assigning the same documents gives the build's sizes.
  const fs::path docs = tmp.write("docs.csv", corpus.substr(0, corpus.rfind("\"short\"")));
  const std::string assigned = (tmp.path / "a.jsonl").string();
  REQUIRE(test::cli({"topics", "assign", "--topics", out, "--input", docs.string(), "--out",
                     assigned}) == 0);
  std::vector<int64_t> hist(4, 0);
  const auto rows = read_jsonl(assigned);
  REQUIRE(rows.size() == 40);
  for (const auto& r : rows) ++hist[r.at("topic").get<size_t>()];
  CHECK(hist == m.sizes);

  // Pretraining pairs: one row per document of >= --min-words words, condition = the corpus's
  // document type + the document's own top words first, then its topic's keywords (no repeats),
  // --keywords in all.
  const std::string pairs = (tmp.path / "pairs.csv").string();
  REQUIRE(test::cli({"topics", "pairs", "--topics", out, "--corpus", cf.string(), "--doc-type",
                     "Note", "--own-keywords", "2", "--keywords", "5", "--min-words", "3",
                     "--out", pairs}) == 0);
  const data::Table pt = data::read_table(pairs);
  REQUIRE(pt.columns == std::vector<std::string>{"condition", "text"});
  REQUIRE(pt.rows.size() == 40);
  const auto assigned_rows = read_jsonl(assigned);
  for (size_t i = 0; i < 40; i += 7) {
    const std::string& cond = pt.rows[i][0];
    REQUIRE(cond.rfind("Document Type: Note\nKeywords: ", 0) == 0);
    std::vector<std::string> words;
    std::stringstream ss(cond.substr(cond.find("Keywords: ") + 10));
    for (std::string w; std::getline(ss, w, ',');) words.push_back(w[0] == ' ' ? w.substr(1) : w);
    CHECK(words.size() == 5);
    CHECK(std::set<std::string>(words.begin(), words.end()).size() == words.size());
    // The own words are words of the document; the rest come from its topic's keywords.
    for (size_t j = 0; j < 2; ++j) CHECK(pt.rows[i][1].find(words[j]) != std::string::npos);
    std::set<std::string> topic_words;
    for (const auto& k : m.keywords[assigned_rows[i].at("topic").get<size_t>()])
      topic_words.insert(k.word);
    for (size_t j = 2; j < words.size(); ++j) CHECK(topic_words.count(words[j]) == 1);
  }
  // The unconditional twin: the same documents, every condition empty (no --doc-type needed).
  REQUIRE(test::cli({"topics", "pairs", "--topics", out, "--corpus", cf.string(),
                     "--empty-condition", "--min-words", "3", "--out", pairs}) == 0);
  const data::Table ut = data::read_table(pairs);
  REQUIRE(ut.rows.size() == 40);
  for (size_t i = 0; i < 40; ++i) {
    CHECK(ut.rows[i][0].empty());
    CHECK(ut.rows[i][1] == pt.rows[i][1]);
  }
  CHECK(test::cli({"topics", "pairs", "--topics", out, "--corpus", cf.string(), "--doc-type", "A",
                   "--doc-type", "B", "--out", pairs}) == 2);
  CHECK(test::cli({"topics", "pairs", "--topics", out, "--corpus", cf.string(), "--doc-type", "A",
                   "--own-keywords", "11", "--out", pairs}) == 2);

  // An encoder with other weights is refused (exit 3), as is a bad --out or a missing model.
  const fs::path other = tmp.path / "other";
  fs::copy(model, other);
  auto f = model::SafetensorsFile::open(other / "model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> ts;
  for (const auto& t : f->tensors()) {
    torch::Tensor v = f->load(t.name).clone();
    if (ts.empty()) v.add_(1);
    ts.emplace_back(t.name, v);
  }
  f.reset();
  model::save_safetensors(other / "model.safetensors", ts);
  CHECK(test::cli({"topics", "assign", "--topics", out, "--input", docs.string(), "--out", assigned,
                   "--model", other.string()}) == 3);
  CHECK(test::cli({"topics", "assign", "--topics", out, "--input", docs.string(), "--out",
                   (tmp.path / "a.txt").string()}) == 2);
  CHECK(test::cli({"topics", "assign", "--topics", (tmp.path / "nope").string(), "--input",
                   docs.string(), "--out", assigned}) == 3);
  CHECK(test::cli({"topics", "build", "--corpus", cf.string(), "--model", model, "--topics", "400",
                   "--out", out}) == 2);

  // Built with a relative encoder path: the model records it and its absolute form, so assign
  // works from any directory; an encoder that moved is refused by name, and --model finds it.
  fs::copy(model, tmp.path / "enc");
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp.path);
  const int built = test::cli({"topics", "build", "--corpus", "corpus.csv", "--model", "enc",
                               "--topics", "4", "--min-words", "3", "--seed", "1", "--out", "tm2"});
  fs::current_path(cwd);
  REQUIRE(built == 0);
  const topics::TopicModel rel = topics::load(tmp.path / "tm2");
  CHECK(rel.embedder["path"] == "enc");
  CHECK(fs::equivalent(rel.embedder["abs_path"].get<std::string>(), tmp.path / "enc"));
  const std::string tm2 = (tmp.path / "tm2").string();
  CHECK(test::cli({"topics", "assign", "--topics", tm2, "--input", docs.string(), "--out",
                   assigned}) == 0);
  fs::rename(tmp.path / "enc", tmp.path / "enc_moved");
  CHECK(test::cli({"topics", "assign", "--topics", tm2, "--input", docs.string(), "--out",
                   assigned}) == 3);
  CHECK(test::cli({"topics", "assign", "--topics", tm2, "--input", docs.string(), "--out", assigned,
                   "--model", (tmp.path / "enc_moved").string()}) == 0);
}
