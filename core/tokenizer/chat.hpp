// Chat formats for instruct models. render_chat() turns a conversation into the prompt text
// and records which byte ranges are the format's control tokens and which belong to assistant
// responses; encode_chat() encodes it (control tokens by id, contents as ordinary text, so a
// "<|im_end|>" typed inside a message stays text) and marks the response tokens, so training can
// restrict the loss to them. Formats (docs/tokenizers.md):
//   plain   base models: each message's content, "\n" after non-assistant messages, the
//           tokenizer's eos after assistant messages; no generation prompt
//   chatml  <|im_start|>role\ncontent<|im_end|>\n ...; generation prompt <|im_start|>assistant\n
//   qwen2.5 chatml, plus Qwen2.5's default system message when the first message is not one
//   llama3  <|begin_of_text|> then <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
//           per message (content trimmed of ASCII whitespace, as Meta's template does);
//           generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n
//   llama2  Llama-2-chat: per user turn <s>[INST] content [/INST] (the system message as
//           <<SYS>>\nsystem\n<</SYS>>\n\n before the first user content), per assistant turn
//           " content </s>"; contents trimmed; turns alternate user / assistant
//   mistral Mistral-7B-Instruct-v0.3: <s> once, [INST] content[/INST] per user turn ([INST] and
//           [/INST] are control tokens; the system message goes before the last user content,
//           then "\n\n"), " content</s>" per assistant turn (trimmed)
//   gemma   <bos> then <start_of_turn>role\ncontent<end_of_turn>\n per turn, the assistant's
//           role spelled "model", contents trimmed, no system role; generation prompt
//           <start_of_turn>model\n
//   phi3    <|system|> / <|user|> / <|assistant|> then "\ncontent<|end|>\n" per turn (Phi-3's
//           model card); generation prompt <|assistant|>\n, else the eos token at the end
// Text runs between control tokens are encoded whole, as HF encodes the rendered template.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpft::tok {

using TokenId = int32_t;
class Tokenizer;

enum class ChatFormat { kPlain, kChatML, kQwen25, kLlama3, kLlama2, kMistral, kGemma, kPhi3 };

// "plain" | "chatml" | "qwen2.5" | "llama3" | "llama2" | "mistral" | "gemma" | "phi3";
// ConfigError listing them otherwise.
ChatFormat parse_chat_format(const std::string& name);
const char* chat_format_name(ChatFormat f);
std::string known_chat_formats();  // "plain, chatml, ..., phi3"
// The format a HF chat_template implements, recognised by its control tokens; nullopt if none.
std::optional<ChatFormat> chat_format_from_template(std::string_view tmpl);

// Qwen2.5's default system message (its chat template adds it when none is given).
extern const char* const kQwen25DefaultSystem;

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct ChatSegment {
  size_t begin = 0, end = 0;  // byte range in ChatPrompt::text
  bool special = false;       // a control token of the format, encoded as its id
  bool response = false;      // part of an assistant response (its content or end-of-turn marker)
};

struct ChatPrompt {
  std::string text;
  std::vector<ChatSegment> segments;                 // non-empty, in order, tiling text
  std::vector<std::pair<size_t, size_t>> responses;  // byte ranges: response content + end marker
};

// The tokenizer's bos and eos texts, where a format uses them ("<s>", "</s>"; empty: none).
// The plain format closes an assistant turn with eos.
struct ChatTokens {
  std::string bos, eos;
};

// Throws InputError when a role is not system/user/assistant, or the format needs turns the
// conversation does not have (alternating user / assistant; gemma: no system message).
ChatPrompt render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, const ChatTokens& tokens = {});
// With the tokenizer's chat format (or `format`) and, for plain, its eos token.
ChatPrompt render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, std::optional<ChatFormat> format = std::nullopt);

struct ChatEncoding {
  std::vector<TokenId> ids;
  std::vector<uint8_t> response_mask;                      // per id: 1 = assistant response
  std::vector<std::pair<size_t, size_t>> response_tokens;  // id ranges [begin, end) per response
};

// Each text segment is encoded on its own (control tokens split the text anyway, and a response
// starts where generation starts after the generation prompt). Throws InputError if a control
// token of the format is not in the tokenizer's vocabulary.
ChatEncoding encode_chat(const Tokenizer& tok, const ChatPrompt& prompt);

}  // namespace dpft::tok
