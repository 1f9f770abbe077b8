// Batched autoregressive generation for CausalLM: prompts are left-padded into one batch and
// decoded incrementally with a KV cache (or, for tests and as the slow reference, by
// recomputing the whole prefix each step). For an encoder-decoder (BART, core/model/seq2seq.hpp)
// the prompts are the sources: right-padded, encoded once, and the decoder starts from
// decoder_start_token_id with a cache of its own keys/values and of the encoder's cross-attention
// keys/values. Greedy, temperature, top-k, top-p (nucleus),
// repetition penalty (Keskar et al. 2019: divide positive / multiply negative logits of seen
// tokens), stop ids and stop strings, max_new_tokens, a per-call seed. Beam search (below) for
// data-to-text decoding.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model/transformer.hpp"

namespace dpft::generate {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  int64_t min_new_tokens = 0;      // stop ids are masked out before this many new tokens
  bool do_sample = false;          // false: greedy (argmax)
  double temperature = 1.0;        // > 0
  int64_t top_k = 0;               // 0 = off
  double top_p = 1.0;              // (0, 1]; 1 = off
  // >= 1 penalises tokens already in the row: the prompt's and the new ones (an encoder-decoder:
  // the decoder's own ids, its start token included, as HF does)
  double repetition_penalty = 1.0;
  int64_t no_repeat_ngram_size = 0;  // n > 0: no n-gram of the row's new tokens occurs twice
  std::vector<int64_t> stop_ids;   // e.g. eos; the stop token is kept in `tokens`
  std::vector<std::string> stop_strings;  // need `decode`; text is cut before the match
  uint64_t seed = 0;               // sampling generator seed (per call)
  bool use_cache = true;           // false: recompute the prefix every step (reference path)
  int64_t pad_id = 0;              // id used for left padding (masked out)
};

struct Generation {
  std::vector<int64_t> tokens;   // new tokens only
  std::string text;              // decode(tokens) cut at a stop string (empty without decode)
  std::string finish_reason;     // "stop_id" | "stop_string" | "length"
  double score = 0;              // beam search: the hypothesis' length-normalised log-probability
};

// prompts: token ids per row (each non-empty). decode: ids -> text, needed for stop strings.
std::vector<Generation> generate(model::CausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerationOptions& opts,
                                 const std::function<std::string(const std::vector<int64_t>&)>& decode = {});

// Beam search (num_beams hypotheses per prompt, log-probabilities summed), as the LoRA code
// Yu et al. 2021 decode E2E / DART with (docs/nlg.md, "Decoding"):
//   - a hypothesis is scored sum(log p) / L^length_penalty, L = its new tokens (the stop token
//     included);
//   - each step extends every running hypothesis by every token; of the best
//     (1 + |stop_ids|) * num_beams extensions, those ending in a stop id are finished and the
//     best num_beams others run on; at max_new_tokens the running ones finish ("length");
//   - no_repeat_ngram_size n > 0: a token that would repeat an n-gram of the hypothesis' own new
//     tokens is banned (the prompt is not searched, as in that code);
//   - min_new_tokens: stop ids are banned before that many new tokens;
//   - early_stopping: true stops a prompt once num_beams hypotheses have finished; false stops
//     it only when no running hypothesis can still beat the best finished one (a bound from the
//     length penalty), so the result is the best hypothesis the beam can reach.
// With num_beams at least the number of distinct prefixes, the result is the exhaustive
// optimum (tested). Returns the best hypothesis per prompt.
struct BeamOptions {
  int64_t num_beams = 4;
  double length_penalty = 1.0;
  int64_t no_repeat_ngram_size = 0;
  bool early_stopping = false;
  int64_t max_new_tokens = 64;
  int64_t min_new_tokens = 0;
  std::vector<int64_t> stop_ids;
  bool use_cache = true;  // false: recompute the prefix every step (reference path)
  int64_t pad_id = 0;
};

std::vector<Generation> beam_search(
    model::CausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
    const BeamOptions& opts,
    const std::function<std::string(const std::vector<int64_t>&)>& decode = {});

// The smallest probability top-p sampling keeps in one row p (V) of probabilities: token i is
// kept iff the mass of the tokens strictly more probable than it is < top_p (the nucleus of
// Holtzman et al. 2020; tokens of equal probability share a fate; masses summed in float64).
// A selection on mass instead of sorting the vocabulary: one pass sums the mass of 8,192 buckets
// of the float bits, a second gathers the bucket where the mass reaches top_p, and three-way
// partitions settle that bucket (expected O(V)); `scratch` is reused across calls.
// tests/test_generate.cpp checks it against a full sort.
float nucleus_floor(const float* p, int64_t V, double top_p, std::vector<float>& scratch);

// CTRL's repetition penalty (Keskar et al. 2019) on logits (B, V) where seen (B, V, bool) is
// set: a positive logit divided by `penalty`, a negative one multiplied; a new tensor.
torch::Tensor apply_repetition_penalty(const torch::Tensor& logits, const torch::Tensor& seen,
                                       double penalty);

// Inverse-CDF draw from one row p (V) restricted to the tokens with p >= floor and p > 0: the
// first token (in vocabulary order) whose running mass (float64) exceeds u times the kept mass,
// u uniform in [0, 1). So P(token i) = p_i / kept mass, one uniform per draw.
int64_t draw_token(const float* p, int64_t V, float floor, double u);

// The choice of nucleus_floor + draw_token for every row at once, by tensor ops on p's device
// (a sort and cumulative sums per row; what choose_next does for logits on a GPU, where the
// host loop would first copy B x V probabilities over): p (B, V) float32 probabilities,
// u (B) float64 uniforms in [0, 1) -> tokens (B) int64 on p's device. Masses are float64 as
// on the host, so it picks the host's token but where a partial sum lands within rounding of
// a boundary (tests/test_generate.cpp compares the two).
torch::Tensor draw_tokens(const torch::Tensor& p, const torch::Tensor& u, double top_p);

// Next-token choice from logits (B, V) given options; exposed for tests.
// `seen` (B, V) bool marks tokens for the repetition penalty (may be undefined).
torch::Tensor choose_next(torch::Tensor logits, const torch::Tensor& seen, const GenerationOptions& opts,
                          torch::Generator& gen);

}  // namespace dpft::generate
