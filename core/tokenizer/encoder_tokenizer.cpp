#include "core/tokenizer/encoder_tokenizer.hpp"

#include <fmt/format.h>

#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

EncoderTokenizer EncoderTokenizer::load(const std::filesystem::path& path) {
  if (auto wp = find_wordpiece(path)) return EncoderTokenizer(WordPiece::load(*wp));
  Tokenizer t = load_tokenizer(path);
  DPFT_CHECK_AS(ConfigError, t.bos_id() && t.eos_id(),
                "{}: an encoder's BPE tokenizer needs bos and eos tokens (RoBERTa's <s> and "
                "</s>); this one has {}",
                path.string(), t.bos_id() ? "no eos" : "no bos");
  return EncoderTokenizer(std::move(t));
}

EncoderTokenizer::EncoderTokenizer(WordPiece wp)
    : wp_(std::make_unique<WordPiece>(std::move(wp))), kind_("wordpiece") {}
EncoderTokenizer::EncoderTokenizer(Tokenizer bpe)
    : bpe_(std::make_unique<Tokenizer>(std::move(bpe))), kind_("bpe") {}
EncoderTokenizer::~EncoderTokenizer() = default;
EncoderTokenizer::EncoderTokenizer(EncoderTokenizer&&) noexcept = default;
EncoderTokenizer& EncoderTokenizer::operator=(EncoderTokenizer&&) noexcept = default;

PairEncoding EncoderTokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                                      size_t max_length) const {
  return wp_ ? wp_->encode_pair(a, b, max_length) : encode_roberta_pair(*bpe_, a, b, max_length);
}

int64_t EncoderTokenizer::pad_id() const {
  std::optional<int64_t> p;
  if (wp_) {
    p = wp_->pad_id();
  } else if (bpe_->pad_id()) {
    p = *bpe_->pad_id();
  } else if (auto t = bpe_->token_to_id("<pad>")) {
    p = *t;
  }
  DPFT_CHECK_AS(ConfigError, p.has_value(),
                "the encoder's tokenizer has no padding token ([PAD] / <pad>); batches of "
                "different lengths cannot be padded");
  return *p;
}

std::optional<int64_t> EncoderTokenizer::mask_id() const {
  if (wp_) return wp_->mask_id();
  if (auto t = bpe_->token_to_id("<mask>")) return static_cast<int64_t>(*t);
  return std::nullopt;
}

int64_t EncoderTokenizer::vocab_size() const {
  return wp_ ? wp_->vocab_size() : bpe_->vocab_size();
}

}  // namespace dpft::tok
