// Chat formats: rendering conversations and encoding them with response masks (see chat.hpp).
#include "core/tokenizer/chat.hpp"

#include <fmt/format.h>

#include "core/tokenizer/tokenizer.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

const char* const kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

namespace {

constexpr std::pair<ChatFormat, const char*> kFormatNames[] = {
    {ChatFormat::kPlain, "plain"},    {ChatFormat::kChatML, "chatml"},
    {ChatFormat::kQwen25, "qwen2.5"}, {ChatFormat::kLlama3, "llama3"},
    {ChatFormat::kLlama2, "llama2"},  {ChatFormat::kMistral, "mistral"},
    {ChatFormat::kGemma, "gemma"},    {ChatFormat::kPhi3, "phi3"}};

}  // namespace

std::string known_chat_formats() {
  std::string known;
  for (const auto& [f, n] : kFormatNames) known += known.empty() ? n : std::string(", ") + n;
  return known;
}

ChatFormat parse_chat_format(const std::string& name) {
  for (const auto& [f, n] : kFormatNames)
    if (name == n) return f;
  throw ConfigError(
      fmt::format("chat format '{}' is not known; allowed: {}", name, known_chat_formats()));
}

const char* chat_format_name(ChatFormat f) {
  for (const auto& [g, n] : kFormatNames)
    if (f == g) return n;
  return "?";
}

std::optional<ChatFormat> chat_format_from_template(std::string_view tmpl) {
  auto has = [&](std::string_view s) { return tmpl.find(s) != std::string_view::npos; };
  if (has("<|im_start|>"))
    return has(kQwen25DefaultSystem) ? ChatFormat::kQwen25 : ChatFormat::kChatML;
  if (has("<|start_header_id|>")) return ChatFormat::kLlama3;
  if (has("<start_of_turn>")) return ChatFormat::kGemma;
  if (has("<|assistant|>") && has("<|end|>")) return ChatFormat::kPhi3;
  if (has("<<SYS>>")) return ChatFormat::kLlama2;
  if (has("[INST]") && has("[/INST]")) return ChatFormat::kMistral;
  return std::nullopt;
}

namespace {

std::string_view trim_ascii(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

struct Builder {
  ChatPrompt out;
  void add(std::string_view s, bool special = false, bool response = false) {
    if (s.empty()) return;
    size_t begin = out.text.size();
    out.text.append(s);
    out.segments.push_back({begin, out.text.size(), special, response});
  }
  size_t size() const { return out.text.size(); }
};

}  // namespace

namespace {

// Llama-2, Mistral and Gemma templates: after an optional system message (none for gemma),
// user and assistant turns alternate, starting with a user turn. InputError otherwise.
void check_alternating(ChatFormat format, const std::vector<ChatMessage>& messages) {
  const bool system = !messages.empty() && messages[0].role == "system";
  if (system && format == ChatFormat::kGemma)
    throw InputError(
        "chat message 0: the gemma format has no system role (Gemma's template refuses it); "
        "fold the system text into the first user message");
  for (size_t i = system ? 1 : 0, k = 0; i < messages.size(); ++i, ++k)
    if (messages[i].role != (k % 2 == 0 ? "user" : "assistant"))
      throw InputError(fmt::format(
          "chat message {}: role '{}' where the {} format needs '{}' (after an optional system "
          "message, turns alternate user / assistant, starting with user)",
          i, messages[i].role, chat_format_name(format), k % 2 == 0 ? "user" : "assistant"));
}

}  // namespace

ChatPrompt render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, const ChatTokens& tokens) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      throw InputError(
          fmt::format("chat message {}: role '{}' is not one of system, user, assistant", i, r));
  }
  Builder b;
  auto response_begin = [&](const ChatMessage& m) {
    return m.role == "assistant" ? b.size() : std::string::npos;
  };
  auto response_end = [&](size_t begin) {
    if (begin != std::string::npos) b.out.responses.emplace_back(begin, b.size());
  };
  // One turn of the chatml-like formats: `open` (a control token), the header text, the
  // content, `close` (a control token, part of an assistant's response), then "\n".
  auto turn = [&](const std::string& open, const std::string& header, std::string_view content,
                  const std::string& close, bool asst) {
    b.add(open, true);
    b.add(header);
    const size_t begin = asst ? b.size() : std::string::npos;
    b.add(content, false, asst);
    b.add(close, true, asst);
    response_end(begin);
    b.add("\n");
  };
  switch (format) {
    case ChatFormat::kPlain:
      for (const ChatMessage& m : messages) {
        size_t begin = response_begin(m);
        bool asst = begin != std::string::npos;
        b.add(m.content, false, asst);
        if (asst) {
          b.add(tokens.eos, true, true);
          response_end(begin);
        } else {
          b.add("\n");
        }
      }
      break;
    case ChatFormat::kChatML:
    case ChatFormat::kQwen25: {
      auto chatml = [&](const std::string& role, std::string_view content, bool asst) {
        turn("<|im_start|>", role + "\n", content, "<|im_end|>", asst);
      };
      if (format == ChatFormat::kQwen25 && (messages.empty() || messages[0].role != "system"))
        chatml("system", kQwen25DefaultSystem, false);
      for (const ChatMessage& m : messages) chatml(m.role, m.content, m.role == "assistant");
      if (add_generation_prompt) {
        b.add("<|im_start|>", true);
        b.add("assistant\n");
      }
      break;
    }
    case ChatFormat::kLlama3: {
      auto header = [&](const std::string& role) {
        b.add("<|start_header_id|>", true);
        b.add(role);
        b.add("<|end_header_id|>", true);
        b.add("\n\n");
      };
      b.add("<|begin_of_text|>", true);
      for (const ChatMessage& m : messages) {
        header(m.role);
        size_t begin = response_begin(m);
        bool asst = begin != std::string::npos;
        b.add(trim_ascii(m.content), false, asst);
        b.add("<|eot_id|>", true, asst);
        response_end(begin);
      }
      if (add_generation_prompt) header("assistant");
      break;
    }
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral: {
      check_alternating(format, messages);
      const bool llama2 = format == ChatFormat::kLlama2;
      const bool system = !messages.empty() && messages[0].role == "system";
      size_t last_user = 0;
      for (size_t i = 0; i < messages.size(); ++i)
        if (messages[i].role == "user") last_user = i;
      if (!llama2) b.add(tokens.bos, true);
      for (size_t i = system ? 1 : 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          std::string content = m.content;
          if (system && llama2 && i == 1)
            content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
          if (system && !llama2 && i == last_user) content = messages[0].content + "\n\n" + content;
          if (llama2) {
            b.add(tokens.bos, true);
            b.add("[INST] " + std::string(trim_ascii(content)) + " [/INST]");
          } else {
            b.add("[INST]", true);
            b.add(" " + content);
            b.add("[/INST]", true);
          }
        } else {
          const size_t begin = b.size();
          b.add(" " + std::string(trim_ascii(m.content)) + (llama2 ? " " : ""), false, true);
          b.add(tokens.eos, true, true);
          response_end(begin);
        }
      }
      break;
    }
    case ChatFormat::kGemma: {
      check_alternating(format, messages);
      b.add(tokens.bos, true);
      for (const ChatMessage& m : messages) {
        const bool asst = m.role == "assistant";
        turn("<start_of_turn>", std::string(asst ? "model" : m.role) + "\n", trim_ascii(m.content),
             "<end_of_turn>", asst);
      }
      if (add_generation_prompt) {
        b.add("<start_of_turn>", true);
        b.add("model\n");
      }
      break;
    }
    case ChatFormat::kPhi3: {
      for (const ChatMessage& m : messages)
        turn("<|" + m.role + "|>", "\n", m.content, "<|end|>", m.role == "assistant");
      if (add_generation_prompt) {
        b.add("<|assistant|>", true);
        b.add("\n");
      } else {
        b.add(tokens.eos, true);
      }
      break;
    }
  }
  return std::move(b.out);
}

ChatPrompt render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, std::optional<ChatFormat> format) {
  ChatTokens tokens;
  if (tok.bos_id()) tokens.bos = tok.decode({*tok.bos_id()});
  if (tok.eos_id()) tokens.eos = tok.decode({*tok.eos_id()});
  return render_chat(format.value_or(tok.chat_format()), messages, add_generation_prompt, tokens);
}

ChatEncoding encode_chat(const Tokenizer& tok, const ChatPrompt& prompt) {
  ChatEncoding e;
  std::vector<size_t> first_byte;  // per id: where it starts in prompt.text
  const auto& segs = prompt.segments;
  for (size_t k = 0; k < segs.size();) {
    std::string_view s(prompt.text.data() + segs[k].begin, segs[k].end - segs[k].begin);
    if (segs[k].special) {
      auto id = tok.token_to_id(s);
      if (!id)
        throw InputError(fmt::format(
            "{}: the chat format's control token '{}' is not in the vocabulary", tok.source(), s));
      e.ids.push_back(*id);
      first_byte.push_back(segs[k].begin);
      ++k;
      continue;
    }
    // A run of text segments up to the next control token, encoded whole (as HF encodes the
    // rendered template); a typed "<|im_end|>" in it stays text.
    size_t j = k;
    while (j < segs.size() && !segs[j].special) ++j;
    const size_t begin = segs[k].begin;
    EncodeOptions o;
    o.text_start = begin == 0;
    const Encoding run = tok.encode_with_offsets(
        std::string_view(prompt.text.data() + begin, segs[j - 1].end - begin), o);
    e.ids.insert(e.ids.end(), run.ids.begin(), run.ids.end());
    for (const Span& sp : run.offsets) first_byte.push_back(begin + sp.begin);
    k = j;
  }
  // A response's ids: those starting in its byte range.
  e.response_mask.assign(e.ids.size(), 0);
  for (const auto& [begin, end] : prompt.responses) {
    size_t a = e.ids.size(), z = e.ids.size();
    for (size_t i = 0; i < e.ids.size(); ++i) {
      if (first_byte[i] >= begin && a == e.ids.size()) a = i;
      if (first_byte[i] >= end) {
        z = i;
        break;
      }
    }
    a = std::min(a, z);
    for (size_t i = a; i < z; ++i) e.response_mask[i] = 1;
    e.response_tokens.emplace_back(a, z);
  }
  return e;
}

}  // namespace dpft::tok
