// CTCL-Topic (paper 004, Section 3.2): a universal topic model built once on public text.
// Documents are embedded with an encoder (core/eval/embed.hpp: mean-pooled, L2-normalised),
// clustered by spherical k-means (faiss::Clustering; the paper's HDBSCAN has no maintained C/C++
// implementation in Debian, and k-means fixes the number of topics, which a histogram over
// topics needs anyway), and each topic is described by its 10 highest class-based TF-IDF words
// (BERTopic's c-TF-IDF, Grootendorst 2022, Eq. 1):
//   W(t, c) = tf(t, c) / sum_t' tf(t', c) * log(1 + A / f(t)),
// tf(t, c) = count of word t in the documents of topic c, f(t) = its count over all topics,
// A = the mean number of words per topic. A document's topic is the topic embedding with the
// largest cosine similarity to its embedding (Section 3.3).
// Nothing here is a DP release: the topic model is built from public text; assigning private
// documents is an input of the DP histogram (methods/ctcl), not an output.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace dpft::topics {

// Lower-cased words of a text as scikit-learn's CountVectorizer default (token_pattern
// \b\w\w+\b): maximal runs of Unicode letters, digits and '_' of 2 or more characters, minus
// runs with no letter and English stop words (core/topics/stop_words.cpp; also "unk", the
// <unk> of wikitext).
std::vector<std::string> keyword_tokens(std::string_view text);
bool is_stop_word(std::string_view lowercase_word);

struct Keyword {
  std::string word;
  double weight = 0;  // W(t, c)
};

// c-TF-IDF keywords: for each of the K topics its `top` words by W(t, c), largest first (ties by
// word), from docs[i] assigned to topic[i] in [0, K). A topic without documents gets none.
std::vector<std::vector<Keyword>> ctfidf_keywords(const std::vector<std::string>& docs,
                                                  const std::vector<int64_t>& topic, int64_t K,
                                                  int64_t top = 10);

struct KMeansOptions {
  int64_t k = 64;
  int64_t iterations = 25;  // Lloyd iterations per run
  int64_t redo = 1;         // runs from different seeds; the best objective is kept
  uint64_t seed = 0;
  // true: spherical (inner products, centroids renormalised: the topic model's); false: plain
  // Euclidean k-means (MAUVE's quantisation, core/eval/distribution.hpp)
  bool spherical = true;
};

// k-means of the rows of x (N, d) float32 (N >= k; unit rows when spherical): centroids (k, d)
// float32 (unit rows when spherical).
// ConfigError when this dpft was built without faiss (DPFT_HAVE_FAISS) or N < k.
torch::Tensor kmeans(const torch::Tensor& x, const KMeansOptions& opts);
bool have_faiss();

// Nearest centroid by inner product (= cosine for unit rows): x (N, d), centroids (K, d), both
// float32 -> (index (N) int64, similarity (N) float32). faiss::IndexFlatIP when built with faiss,
// else nearest_reference.
std::pair<torch::Tensor, torch::Tensor> nearest(const torch::Tensor& x,
                                                const torch::Tensor& centroids);
// The obvious reference: argmax of x centroids^T (ties: the lowest index).
std::pair<torch::Tensor, torch::Tensor> nearest_reference(const torch::Tensor& x,
                                                          const torch::Tensor& centroids);

// The k nearest rows of `base` (M, d) to each row of `queries` (N, d), both float32, by
// Euclidean distance (for the unit rows of eval::embed_texts the same order as cosine):
// (index (N, k) int64, squared distance (N, k) float32), nearest first; 1 <= k <= M.
// faiss::IndexFlatL2 (exact search) when built with faiss, else knn_reference. Private
// Evolution's nearest-neighbour histogram (core/privacy/histogram.hpp) votes with it.
std::pair<torch::Tensor, torch::Tensor> knn(const torch::Tensor& queries, const torch::Tensor& base,
                                            int64_t k);
// The obvious reference: the full (N, M) squared-distance matrix, sorted per row (stable: ties
// keep the lower index).
std::pair<torch::Tensor, torch::Tensor> knn_reference(const torch::Tensor& queries,
                                                      const torch::Tensor& base, int64_t k);

struct TopicModel {
  torch::Tensor centroids;                     // (K, d) float32, unit rows
  std::vector<std::vector<Keyword>> keywords;  // K lists (up to `keywords` words each)
  std::vector<int64_t> sizes;                  // build-corpus documents per topic
  // The embedding model: {"path", "model_type", "hidden_size", "params_sha256", "max_length",
  // "pooling"}; documents assigned later must be embedded with the same weights.
  nlohmann::json embedder;
  nlohmann::json build;  // how it was built: corpus files, documents, k-means settings, time

  int64_t num_topics() const { return centroids.defined() ? centroids.size(0) : 0; }
  // The topic's keywords joined with ", " (the condition CTCL's generator is given).
  std::string keyword_line(int64_t topic) const;
};

// Section 3.2's build from the embeddings x (N, d) float32, unit rows, of `docs` (public text):
// spherical k-means into kmeans.k topics (kmeans.spherical is forced), each document's nearest
// topic, the topic sizes and `keywords` c-TF-IDF words per topic. Sets centroids, keywords,
// sizes and build {documents, topics, keywords, kmeans {library, spherical, iterations, redo,
// seed}, mean_similarity, kmeans_seconds}; the caller adds the embedder and the corpus.
// ConfigError as kmeans.
TopicModel build_topic_model(const std::vector<std::string>& docs, const torch::Tensor& x,
                             KMeansOptions kmeans, int64_t keywords);
// "K topics from N documents (sizes min a, median b, max c; e empty)", for people.
std::string describe(const TopicModel& m);

// DIR/topic_model.safetensors (tensor `centroids`; metadata `format` = "dpft-topics-1" and
// `model`: JSON {keywords, sizes, embedder, build}) and DIR/topics.jsonl (one line per topic:
// {topic, size, keywords, weights}; for people, not read back). Atomic writes.
void save(const TopicModel& m, const std::filesystem::path& dir);
// InputError for a missing or malformed file (naming it).
TopicModel load(const std::filesystem::path& dir);

}  // namespace dpft::topics
