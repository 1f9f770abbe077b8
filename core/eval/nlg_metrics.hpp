// Corpus-level, multi-reference metrics for data-to-text generation, defined as the E2E NLG
// Challenge's official evaluation computes them (paper 003, Tables 4-5):
// - BLEU (Papineni et al. 2002) and NIST (Doddington 2002) as mteval-v13a: n-gram counts clipped
//   by the maximum count in any reference of the segment, BLEU's brevity penalty against the
//   closest reference length (ties: the shorter), NIST's information weights
//   log2(count(w1..wn-1) / count(w1..wn)) over all references of the corpus and its penalty
//   exp(beta log^2 min(1, L_sys / L_ref)) with the average reference length, beta such that the
//   penalty is 1/2 at a ratio of 2/3. BLEU 4-grams, NIST 5-grams.
// - METEOR (Lavie & Agarwal 2007) without synonym or paraphrase tables: exact then stem
//   (Snowball English stemmer, as METEOR 1.5 uses) matches, NLTK's alignment and parameters
//   (alpha 0.9, beta 3, gamma 0.5); the best reference per segment, the corpus score is the mean
//   over segments. METEOR 1.5 (the E2E script's, Java) also matches WordNet synonyms and
//   paraphrases, weights content and function words and uses other parameters, so its numbers
//   are not comparable with these (docs/nlg.md).
// - ROUGE-L as the MS-COCO caption scripts: per segment the maximum LCS precision and the maximum
//   LCS recall over the references, F with beta 1.2; the corpus score is the mean.
// - CIDEr as the MS-COCO caption scripts' CIDEr-D: tf-idf n-gram vectors (n 1..4, document
//   frequency over the segments' reference sets), clipped cosine, Gaussian length penalty
//   (sigma 6; "length" counts bigrams, as there), mean over n and references, times 10.
// All metrics read text through the same mteval-v13a tokenization, lower-cased (the E2E script's
// default, case-insensitive).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dpft::eval::nlg {

using Tokens = std::vector<std::string>;  // no token holds whitespace

// mteval-v13a's NormalizeText: SGML entities, punctuation split off (not apostrophes; periods
// and commas only when not between digits; a dash after a digit), whitespace collapsed; ASCII
// lower case unless `keep_case`.
Tokens tokenize(const std::string& text, bool keep_case = false);

// One corpus: hyps[i] is scored against refs[i] (at least one reference each; references may
// be empty strings, which count as such).
struct Corpus {
  std::vector<Tokens> hyps;
  std::vector<std::vector<Tokens>> refs;
};

// Tokenizes every hypothesis and reference; throws InputError when the counts differ or a
// segment has no reference.
Corpus make_corpus(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, bool keep_case = false);

double bleu(const Corpus& c, int max_n = 4);  // in [0, 1]
double nist(const Corpus& c, int max_n = 5);

struct MeteorParams {
  double alpha = 0.9, beta = 3.0, gamma = 0.5;
  std::string stemmer = "english";  // a Snowball algorithm name (libstemmer)
};
double meteor_segment(const Tokens& hyp, const std::vector<Tokens>& refs,
                      const MeteorParams& p = {});
double meteor(const Corpus& c, const MeteorParams& p = {});

double rouge_l_segment(const Tokens& hyp, const std::vector<Tokens>& refs, double beta = 1.2);
double rouge_l(const Corpus& c, double beta = 1.2);

double cider(const Corpus& c, int max_n = 4, double sigma = 6.0);

struct Scores {
  double bleu = 0, nist = 0, meteor = 0, rouge_l = 0, cider = 0;
  size_t segments = 0, references = 0;
};
Scores score_all(const Corpus& c);

}  // namespace dpft::eval::nlg
