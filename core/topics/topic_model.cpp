#include "core/topics/topic_model.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/model/safetensors.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"
#include "core/util/strings.hpp"

#ifdef DPFT_HAVE_FAISS
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/FaissException.h>
#endif

namespace dpft::topics {

namespace {

bool is_letter(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool is_number(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

void check_rows(const torch::Tensor& t, const char* what) {
  DPFT_CHECK_AS(RuntimeError,
                t.defined() && t.dim() == 2 && t.scalar_type() == torch::kFloat32 && !t.is_cuda(),
                "topics: {} must be a 2-D float32 CPU tensor", what);
}

}  // namespace

std::vector<std::string> keyword_tokens(std::string_view text) {
  std::vector<std::string> out;
  std::string word;
  size_t chars = 0;
  bool letter = false;
  auto flush = [&] {
    if (chars >= 2 && letter && !is_stop_word(word)) out.push_back(word);
    word.clear();
    chars = 0;
    letter = false;
  };
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: a word boundary
      flush();
      ++p;
      --left;
      continue;
    }
    p += n;
    left -= n;
    const utf8proc_category_t cat = utf8proc_category(cp);
    if (is_letter(cat) || is_number(cat) || cp == '_') {
      letter = letter || is_letter(cat);
      utf8proc_uint8_t buf[4];
      const utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower(cp), buf);
      word.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
      ++chars;
    } else {
      flush();
    }
  }
  flush();
  return out;
}

std::vector<std::vector<Keyword>> ctfidf_keywords(const std::vector<std::string>& docs,
                                                  const std::vector<int64_t>& topic, int64_t K,
                                                  int64_t top) {
  DPFT_CHECK_AS(RuntimeError, docs.size() == topic.size(), "topics: {} documents but {} topic ids",
                docs.size(), topic.size());
  DPFT_CHECK_AS(ConfigError, K >= 1 && top >= 1, "topics: need K >= 1 and top >= 1");
  std::unordered_map<std::string, size_t> id;
  std::vector<std::string> words;
  std::vector<std::unordered_map<size_t, double>> tf(static_cast<size_t>(K));
  for (size_t i = 0; i < docs.size(); ++i) {
    DPFT_CHECK_AS(RuntimeError, topic[i] >= 0 && topic[i] < K,
                  "topics: document {} has topic {} outside [0, {})", i, topic[i], K);
    for (auto& w : keyword_tokens(docs[i])) {
      auto [it, added] = id.emplace(w, words.size());
      if (added) words.push_back(w);
      tf[static_cast<size_t>(topic[i])][it->second] += 1;
    }
  }
  std::vector<double> f(words.size(), 0.0), total(static_cast<size_t>(K), 0.0);
  for (size_t c = 0; c < tf.size(); ++c)
    for (const auto& [w, n] : tf[c]) {
      f[w] += n;
      total[c] += n;
    }
  // A: the mean number of words per topic (BERTopic truncates it to an integer; kept exact here).
  const double A = std::accumulate(total.begin(), total.end(), 0.0) / static_cast<double>(K);
  std::vector<std::vector<Keyword>> out(static_cast<size_t>(K));
  for (size_t c = 0; c < tf.size(); ++c) {
    std::vector<Keyword> all;
    all.reserve(tf[c].size());
    for (const auto& [w, n] : tf[c])
      all.push_back({words[w], n / total[c] * std::log(1.0 + A / f[w])});
    const size_t keep = std::min(all.size(), static_cast<size_t>(top));
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(),
                      [](const Keyword& a, const Keyword& b) {
                        return a.weight != b.weight ? a.weight > b.weight : a.word < b.word;
                      });
    all.resize(keep);
    out[c] = std::move(all);
  }
  return out;
}

bool have_faiss() {
#ifdef DPFT_HAVE_FAISS
  return true;
#else
  return false;
#endif
}

torch::Tensor kmeans(const torch::Tensor& x, const KMeansOptions& o) {
  check_rows(x, "k-means input");
  const int64_t N = x.size(0), d = x.size(1);
  DPFT_CHECK_AS(ConfigError, o.k >= 1 && o.iterations >= 1 && o.redo >= 1,
                "topics: k-means needs topics >= 1, iterations >= 1 and redo >= 1 (got {}, {}, {})",
                o.k, o.iterations, o.redo);
  DPFT_CHECK_AS(ConfigError, N >= o.k,
                "topics: {} documents cannot make {} topics; give more documents (or lower "
                "--min-words) or ask for at most {} topics",
                N, o.k, N);
#ifdef DPFT_HAVE_FAISS
  faiss::ClusteringParameters cp;
  cp.niter = static_cast<int>(o.iterations);
  cp.nredo = static_cast<int>(o.redo);
  cp.spherical = o.spherical;
  cp.seed = static_cast<int>(o.seed % static_cast<uint64_t>(INT_MAX));
  cp.min_points_per_centroid = 1;        // no warning for small corpora
  cp.max_points_per_centroid = INT_MAX;  // every document takes part (no subsample)
  cp.verbose = false;
  faiss::Clustering clus(static_cast<int>(d), static_cast<size_t>(o.k), cp);
  faiss::IndexFlatIP ip(d);
  faiss::IndexFlatL2 l2(d);
  faiss::Index& index = o.spherical ? static_cast<faiss::Index&>(ip) : l2;
  const torch::Tensor xc = x.contiguous();
  try {
    clus.train(N, xc.data_ptr<float>(), index);
  } catch (const faiss::FaissException& e) {
    throw RuntimeError(fmt::format("topics: faiss k-means failed: {}", e.what()));
  }
  return torch::from_blob(clus.centroids.data(), {o.k, d}, torch::kFloat32).clone();
#else
  throw ConfigError(
      "topics: this dpft was built without faiss, which k-means needs; install libfaiss-dev "
      "(scripts/setup.sh) and rebuild");
#endif
}

std::pair<torch::Tensor, torch::Tensor> nearest_reference(const torch::Tensor& x,
                                                          const torch::Tensor& centroids) {
  check_rows(x, "documents");
  check_rows(centroids, "centroids");
  DPFT_CHECK_AS(InputError, x.size(1) == centroids.size(1),
                "topics: embeddings have {} dims, the topic model {}", x.size(1),
                centroids.size(1));
  if (x.size(0) == 0) return {torch::empty({0}, torch::kInt64), torch::empty({0}, torch::kFloat32)};
  auto [sim, idx] = torch::matmul(x, centroids.t()).max(1);
  return {idx, sim};
}

std::pair<torch::Tensor, torch::Tensor> nearest(const torch::Tensor& x,
                                                const torch::Tensor& centroids) {
#ifdef DPFT_HAVE_FAISS
  check_rows(x, "documents");
  check_rows(centroids, "centroids");
  DPFT_CHECK_AS(InputError, x.size(1) == centroids.size(1),
                "topics: embeddings have {} dims, the topic model {}", x.size(1),
                centroids.size(1));
  const int64_t N = x.size(0), d = x.size(1);
  faiss::IndexFlatIP index(d);
  const torch::Tensor c = centroids.contiguous(), xc = x.contiguous();
  torch::Tensor idx = torch::empty({N}, torch::kInt64);
  torch::Tensor sim = torch::empty({N}, torch::kFloat32);
  try {
    index.add(c.size(0), c.data_ptr<float>());
    if (N > 0)
      index.search(N, xc.data_ptr<float>(), 1, sim.data_ptr<float>(), idx.data_ptr<int64_t>());
  } catch (const faiss::FaissException& e) {
    throw RuntimeError(fmt::format("topics: faiss search failed: {}", e.what()));
  }
  return {idx, sim};
#else
  return nearest_reference(x, centroids);
#endif
}

namespace {
void check_knn(const torch::Tensor& q, const torch::Tensor& b, int64_t k) {
  check_rows(q, "queries");
  check_rows(b, "base");
  DPFT_CHECK_AS(InputError, q.size(1) == b.size(1),
                "nearest neighbours: queries have {} dims, the base {}", q.size(1), b.size(1));
  DPFT_CHECK_AS(ConfigError, k >= 1 && k <= b.size(0),
                "nearest neighbours: k = {} must be in [1, {}] (the base's rows)", k, b.size(0));
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> knn_reference(const torch::Tensor& queries,
                                                      const torch::Tensor& base, int64_t k) {
  check_knn(queries, base, k);
  if (queries.size(0) == 0)
    return {torch::empty({0, k}, torch::kInt64), torch::empty({0, k}, torch::kFloat32)};
  // (N, M) squared distances in float64, then a stable sort of each row.
  const torch::Tensor q = queries.to(torch::kFloat64), b = base.to(torch::kFloat64);
  const torch::Tensor d2 = (q.unsqueeze(1) - b.unsqueeze(0)).pow(2).sum(2);
  auto [sorted, order] = d2.sort(/*stable=*/true, /*dim=*/1, /*descending=*/false);
  return {order.slice(1, 0, k).contiguous(), sorted.slice(1, 0, k).to(torch::kFloat32)};
}

std::pair<torch::Tensor, torch::Tensor> knn(const torch::Tensor& queries, const torch::Tensor& base,
                                            int64_t k) {
#ifdef DPFT_HAVE_FAISS
  check_knn(queries, base, k);
  const int64_t N = queries.size(0), d = queries.size(1);
  faiss::IndexFlatL2 index(d);
  const torch::Tensor b = base.contiguous(), q = queries.contiguous();
  torch::Tensor idx = torch::empty({N, k}, torch::kInt64);
  torch::Tensor dist = torch::empty({N, k}, torch::kFloat32);
  try {
    index.add(b.size(0), b.data_ptr<float>());
    if (N > 0)
      index.search(N, q.data_ptr<float>(), k, dist.data_ptr<float>(), idx.data_ptr<int64_t>());
  } catch (const faiss::FaissException& e) {
    throw RuntimeError(fmt::format("nearest neighbours: faiss search failed: {}", e.what()));
  }
  return {idx, dist};
#else
  return knn_reference(queries, base, k);
#endif
}

std::string TopicModel::keyword_line(int64_t topic) const {
  DPFT_CHECK_AS(RuntimeError, topic >= 0 && topic < static_cast<int64_t>(keywords.size()),
                "topics: no topic {} (the model has {})", topic, keywords.size());
  std::vector<std::string> w;
  for (const auto& k : keywords[static_cast<size_t>(topic)]) w.push_back(k.word);
  return join(w, ", ");
}

namespace {
constexpr const char* kFormat = "dpft-topics-1";
}

TopicModel build_topic_model(const std::vector<std::string>& docs, const torch::Tensor& x,
                             KMeansOptions kmeans, int64_t keywords) {
  DPFT_CHECK(x.dim() == 2 && x.size(0) == static_cast<int64_t>(docs.size()),
             "build_topic_model: {} embeddings for {} documents", x.dim() ? x.size(0) : 0,
             docs.size());
  kmeans.spherical = true;
  const auto t0 = std::chrono::steady_clock::now();
  TopicModel m;
  m.centroids = topics::kmeans(x, kmeans);
  const double kmeans_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto [idx, sim] = nearest(x, m.centroids);
  const std::vector<int64_t> topic(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  m.sizes.assign(static_cast<size_t>(kmeans.k), 0);
  for (const int64_t t : topic) ++m.sizes[static_cast<size_t>(t)];
  m.keywords = ctfidf_keywords(docs, topic, kmeans.k, keywords);
  m.build = {{"documents", docs.size()},
             {"topics", kmeans.k},
             {"keywords", keywords},
             {"kmeans",
              {{"library", "faiss"},
               {"spherical", true},
               {"iterations", kmeans.iterations},
               {"redo", kmeans.redo},
               {"seed", kmeans.seed}}},
             {"mean_similarity", sim.numel() ? sim.mean().item<double>() : 0.0},
             {"kmeans_seconds", kmeans_s}};
  return m;
}

std::string describe(const TopicModel& m) {
  std::vector<int64_t> sorted = m.sizes;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty()) return "0 topics";
  return fmt::format("{} topics from {} documents (sizes min {}, median {}, max {}; {} empty)",
                     m.num_topics(), std::accumulate(sorted.begin(), sorted.end(), int64_t{0}),
                     sorted.front(), sorted[sorted.size() / 2], sorted.back(),
                     std::count(sorted.begin(), sorted.end(), 0));
}

void save(const TopicModel& m, const std::filesystem::path& dir) {
  const int64_t K = m.num_topics();
  DPFT_CHECK_AS(RuntimeError,
                K >= 1 && static_cast<int64_t>(m.keywords.size()) == K &&
                    static_cast<int64_t>(m.sizes.size()) == K,
                "topics: save needs centroids, keywords and sizes for every topic");
  std::filesystem::create_directories(dir);
  nlohmann::json words = nlohmann::json::array(), weights = nlohmann::json::array();
  std::string lines;
  for (int64_t c = 0; c < K; ++c) {
    nlohmann::json w = nlohmann::json::array(), v = nlohmann::json::array();
    for (const auto& k : m.keywords[static_cast<size_t>(c)]) {
      w.push_back(k.word);
      v.push_back(k.weight);
    }
    lines += nlohmann::json{{"topic", c},
                            {"size", m.sizes[static_cast<size_t>(c)]},
                            {"keywords", w},
                            {"weights", v}}
                 .dump() +
             "\n";
    words.push_back(std::move(w));
    weights.push_back(std::move(v));
  }
  const nlohmann::json meta{{"keywords", words},
                            {"weights", weights},
                            {"sizes", m.sizes},
                            {"embedder", m.embedder},
                            {"build", m.build}};
  model::save_safetensors(dir / "topic_model.safetensors",
                          {{"centroids", m.centroids.to(torch::kFloat32).contiguous()}},
                          {{"format", kFormat}, {"model", meta.dump()}});
  write_file_atomic(dir / "topics.jsonl", lines);
}

TopicModel load(const std::filesystem::path& dir) {
  const auto path = dir / "topic_model.safetensors";
  DPFT_CHECK_AS(InputError, std::filesystem::exists(path),
                "topics: {} not found: is {} a topic model (dpft topics build --out DIR)?",
                path.string(), dir.string());
  auto f = model::SafetensorsFile::open(path);
  const auto& md = f->metadata();
  auto fmt_it = md.find("format");
  DPFT_CHECK_AS(InputError, fmt_it != md.end() && fmt_it->second == kFormat,
                "topics: {} has format '{}', expected '{}'", path.string(),
                fmt_it == md.end() ? "" : fmt_it->second, kFormat);
  TopicModel m;
  m.centroids = f->load("centroids").to(torch::kFloat32);
  DPFT_CHECK_AS(InputError,
                m.centroids.dim() == 2 && m.centroids.size(0) >= 1 && m.centroids.size(1) >= 1,
                "topics: {}: centroids must be a (K >= 1 topics, d >= 1) matrix, got shape {}; "
                "rebuild the topic model (dpft topics build)",
                path.string(), shape_str(m.centroids.sizes()));
  DPFT_CHECK_AS(InputError, torch::isfinite(m.centroids).all().item<bool>(),
                "topics: {}: the centroids hold NaN or infinite values; rebuild the topic model "
                "(dpft topics build)",
                path.string());
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(md.at("model"));
    const int64_t K = m.centroids.size(0);
    DPFT_CHECK_AS(InputError,
                  m.centroids.dim() == 2 && static_cast<int64_t>(meta.at("keywords").size()) == K &&
                      static_cast<int64_t>(meta.at("sizes").size()) == K &&
                      static_cast<int64_t>(meta.at("weights").size()) == K,
                  "topics: {}: centroids, keywords, weights and sizes disagree on the number of "
                  "topics",
                  path.string());
    m.sizes = meta.at("sizes").get<std::vector<int64_t>>();
    for (int64_t c = 0; c < K; ++c) {
      const auto& w = meta["keywords"][static_cast<size_t>(c)];
      const auto& v = meta["weights"][static_cast<size_t>(c)];
      DPFT_CHECK_AS(InputError, w.size() == v.size(),
                    "topics: {}: topic {} has {} words, {} weights", path.string(), c, w.size(),
                    v.size());
      std::vector<Keyword> ks;
      for (size_t i = 0; i < w.size(); ++i)
        ks.push_back({w[i].get<std::string>(), v[i].get<double>()});
      m.keywords.push_back(std::move(ks));
    }
    m.embedder = meta.at("embedder");
    m.build = meta.value("build", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("topics: {}: malformed metadata: {}", path.string(), e.what()));
  } catch (const std::out_of_range&) {
    throw InputError(fmt::format("topics: {}: no 'model' metadata", path.string()));
  }
  return m;
}

}  // namespace dpft::topics
