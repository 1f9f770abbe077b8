// Chat formats: rendering conversations and encoding them with response masks (see chat.hpp).
#include "core/tokenizer/chat.hpp"

#include <fmt/format.h>

#include "core/tokenizer/tokenizer.hpp"
#include "core/util/error.hpp"

namespace dpft::tok {

const char* const kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

ChatFormat parse_chat_format(const std::string& name) {
  if (name == "plain") return ChatFormat::kPlain;
  if (name == "chatml") return ChatFormat::kChatML;
  if (name == "qwen2.5") return ChatFormat::kQwen25;
  if (name == "llama3") return ChatFormat::kLlama3;
  throw ConfigError(
      fmt::format("chat format '{}' is not known; allowed: plain, chatml, qwen2.5, llama3", name));
}

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kPlain:
      return "plain";
    case ChatFormat::kChatML:
      return "chatml";
    case ChatFormat::kQwen25:
      return "qwen2.5";
    case ChatFormat::kLlama3:
      return "llama3";
  }
  return "?";
}

std::optional<ChatFormat> chat_format_from_template(std::string_view tmpl) {
  if (tmpl.find("<|im_start|>") != std::string_view::npos)
    return tmpl.find(kQwen25DefaultSystem) != std::string_view::npos ? ChatFormat::kQwen25
                                                                     : ChatFormat::kChatML;
  if (tmpl.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::kLlama3;
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

ChatPrompt render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, std::string_view plain_end) {
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
  switch (format) {
    case ChatFormat::kPlain:
      for (const ChatMessage& m : messages) {
        size_t begin = response_begin(m);
        bool asst = begin != std::string::npos;
        b.add(m.content, false, asst);
        if (asst) {
          b.add(plain_end, true, true);
          response_end(begin);
        } else {
          b.add("\n");
        }
      }
      break;
    case ChatFormat::kChatML:
    case ChatFormat::kQwen25: {
      auto turn = [&](const std::string& role, std::string_view content, bool asst) {
        b.add("<|im_start|>", true);
        b.add(role + "\n");
        size_t begin = asst ? b.size() : std::string::npos;
        b.add(content, false, asst);
        b.add("<|im_end|>", true, asst);
        response_end(begin);
        b.add("\n");
      };
      if (format == ChatFormat::kQwen25 && (messages.empty() || messages[0].role != "system"))
        turn("system", kQwen25DefaultSystem, false);
      for (const ChatMessage& m : messages) turn(m.role, m.content, m.role == "assistant");
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
  }
  return std::move(b.out);
}

ChatPrompt render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, std::optional<ChatFormat> format) {
  std::string plain_end = tok.eos_id() ? tok.decode({*tok.eos_id()}) : std::string();
  return render_chat(format.value_or(tok.chat_format()), messages, add_generation_prompt,
                     plain_end);
}

ChatEncoding encode_chat(const Tokenizer& tok, const ChatPrompt& prompt) {
  ChatEncoding e;
  std::vector<size_t> seg_first(prompt.segments.size() + 1);  // first id of each segment
  for (size_t k = 0; k < prompt.segments.size(); ++k) {
    const ChatSegment& seg = prompt.segments[k];
    std::string_view s(prompt.text.data() + seg.begin, seg.end - seg.begin);
    seg_first[k] = e.ids.size();
    if (seg.special) {
      auto id = tok.token_to_id(s);
      if (!id)
        throw InputError(fmt::format(
            "{}: the chat format's control token '{}' is not in the vocabulary", tok.source(), s));
      e.ids.push_back(*id);
    } else {
      std::vector<TokenId> ids = tok.encode(s);
      e.ids.insert(e.ids.end(), ids.begin(), ids.end());
    }
    e.response_mask.resize(e.ids.size(), seg.response ? 1 : 0);
  }
  seg_first.back() = e.ids.size();
  // Segments tile the text in order: a response's ids run from the first segment starting at or
  // after its begin to the first segment starting at or after its end.
  auto first_id_at = [&](size_t byte) {
    for (size_t k = 0; k < prompt.segments.size(); ++k)
      if (prompt.segments[k].begin >= byte) return seg_first[k];
    return seg_first.back();
  };
  for (const auto& [begin, end] : prompt.responses)
    e.response_tokens.emplace_back(first_id_at(begin), first_id_at(end));
  return e;
}

}  // namespace dpft::tok
