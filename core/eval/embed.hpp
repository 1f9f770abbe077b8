// Sentence embeddings with an encoder (the building block of CTCL's topic model, and of FID /
// MAUVE-style measures later): each text -> the mean of its last hidden states over real tokens,
// L2-normalised (model::mean_pool_normalize), as sentence-transformers' all-MiniLM-L6-v2.
// Texts are batched by length (dynamic padding; the order of the result is the input's) and
// run without gradients on the model's device.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/encoder.hpp"
#include "core/tokenizer/encoder_tokenizer.hpp"

namespace dpft::eval {

struct EmbedOptions {
  int64_t batch = 32;     // texts per forward
  size_t max_length = 0;  // tokens per text, specials included (0: the model's positions)
  // Called after each batch with (texts done, total).
  std::function<void(int64_t, int64_t)> on_batch;
};

// An encoder checkpoint and its tokenizer, loaded for embedding.
struct Embedder {
  model::Encoder model;
  tok::EncoderTokenizer tok;
  std::string path;  // as given
  // What identifies the embedding function: {"path", "model_type", "hidden_size",
  // "params_sha256" (of every parameter in float32), "max_length", "pooling"}.
  nlohmann::json identity(size_t max_length) const;
};

// Loads `path` (an HF-format bert / roberta checkpoint with its tokenizer) onto `device`.
// ConfigError naming `what` (the command) if the model is not an encoder or the device is absent.
Embedder load_embedder(const std::string& path, const std::string& device, const std::string& what);

// (N, d) float32 on the CPU, row i the embedding of texts[i]. N = 0 gives (0, d).
torch::Tensor embed_texts(model::EncoderImpl& model, const tok::EncoderTokenizer& tok,
                          const std::vector<std::string>& texts, const EmbedOptions& opts = {});

// The encoder a file recorded by identity() (a topic model's): `path` when not empty, else the
// recorded path as given, else its recorded absolute form ("abs_path"). InputError when none is
// found (naming what was tried and `hint`: how to pass another path) or when its weights'
// sha256 differs from the recorded one.
Embedder load_embedder_matching(const nlohmann::json& identity, const std::string& path,
                                const std::string& device, const std::string& what,
                                const std::string& hint);

// embed_texts(em's model and tokenizer) with a progress bar named `label` on stderr; `seconds`
// (if given) receives the wall time. Returns [N, d].
torch::Tensor embed_with_progress(Embedder& em, const std::vector<std::string>& texts,
                                  int64_t batch, size_t max_length, const std::string& label,
                                  double* seconds = nullptr);

}  // namespace dpft::eval
