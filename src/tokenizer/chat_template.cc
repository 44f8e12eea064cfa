#include "tokenizer/chat_template.h"

#include <array>
#include <utility>

namespace tandem::tokenizer {
namespace {

constexpr std::array<std::pair<ChatTemplate, std::string_view>, 8> kNames = {{
    {ChatTemplate::kChatMl, "chatml"},
    {ChatTemplate::kLlama2, "llama2"},
    {ChatTemplate::kLlama3, "llama3"},
    {ChatTemplate::kMistral, "mistral"},
    {ChatTemplate::kGemma, "gemma"},
    {ChatTemplate::kPhi3, "phi3"},
    {ChatTemplate::kDeepSeek, "deepseek"},
    {ChatTemplate::kDeepSeek3, "deepseek3"},
}};

constexpr std::string_view kDeepSeekEos = "<｜end▁of▁sentence｜>";

std::string_view Trim(std::string_view s) {
  const std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Families without a system role: system text goes before the next user message.
class PendingSystem {
 public:
  void Add(std::string_view text) {
    if (!text_.empty()) text_ += "\n\n";
    text_ += text;
  }
  // The user content with any pending system text before it, separated by a blank line.
  std::string Merge(std::string_view user) {
    std::string out;
    if (!text_.empty()) out = std::move(text_) + "\n\n";
    text_.clear();
    out += user;
    return out;
  }

 private:
  std::string text_;
};

std::string RenderChatMl(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string RenderLlama2(std::span<const ChatMessage> messages) {
  std::string out;
  std::string system;
  bool first_user = true;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = Trim(m.content);
    } else if (m.role == "user") {
      out += first_user ? "[INST] " : "<s>[INST] ";  // the first BOS comes from the tokenizer
      if (!system.empty()) {
        out.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
        system.clear();
      }
      out.append(Trim(m.content)).append(" [/INST]");
      first_user = false;
    } else {
      out.append(" ").append(Trim(m.content)).append(" </s>");
    }
  }
  return out;
}

std::string RenderLlama3(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
    out.append(Trim(m.content)).append("<|eot_id|>");
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string RenderMistral(std::span<const ChatMessage> messages) {
  std::string out;
  PendingSystem system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.Add(m.content);
    } else if (m.role == "user") {
      out += "[INST] " + system.Merge(m.content) + " [/INST]";
    } else {
      out += m.content + "</s>";
    }
  }
  return out;
}

std::string RenderGemma(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  PendingSystem system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.Add(Trim(m.content));
    } else if (m.role == "user") {
      out += "<start_of_turn>user\n" + system.Merge(Trim(m.content)) + "<end_of_turn>\n";
    } else {
      out.append("<start_of_turn>model\n").append(Trim(m.content)).append("<end_of_turn>\n");
    }
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string RenderPhi3(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  if (gen) out += "<|assistant|>\n";
  return out;
}

std::string RenderDeepSeek(std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += m.content + "\n\n";
    } else if (m.role == "user") {
      out += "User: " + m.content + "\n\n";
    } else {
      out.append("Assistant: ").append(m.content).append(kDeepSeekEos);
    }
  }
  if (gen) out += "Assistant:";
  return out;
}

std::string RenderDeepSeek3(std::span<const ChatMessage> messages, bool gen) {
  // System prompts come first, joined by blank lines, then the turns.
  std::string system, turns;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (!system.empty()) system += "\n\n";
      system += m.content;
    } else if (m.role == "user") {
      turns += "<｜User｜>" + m.content;
    } else {
      turns.append("<｜Assistant｜>").append(m.content).append(kDeepSeekEos);
    }
  }
  std::string out = system + turns;
  if (gen) out += "<｜Assistant｜>";
  return out;
}

}  // namespace

std::string_view ChatTemplateName(ChatTemplate t) {
  for (const auto& [kind, name] : kNames) {
    if (kind == t) return name;
  }
  return "?";
}

std::string SupportedChatTemplates() {
  std::string out;
  for (const auto& [kind, name] : kNames) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

Result<ChatTemplate> ChatTemplateFromName(std::string_view name) {
  for (const auto& [kind, n] : kNames) {
    if (n == name) return kind;
  }
  return Status::InvalidArgument("unknown chat template \"" + std::string(name) +
                                 "\" (supported: " + SupportedChatTemplates() + ")");
}

Result<ChatTemplate> DetectChatTemplate(std::string_view src) {
  // Most distinctive first: several families mention [INST] or "Assistant".
  if (Contains(src, "<|im_start|>")) return ChatTemplate::kChatMl;
  if (Contains(src, "<|start_header_id|>") && Contains(src, "<|end_header_id|>")) {
    return ChatTemplate::kLlama3;
  }
  if (Contains(src, "<start_of_turn>")) return ChatTemplate::kGemma;
  if (Contains(src, "<|assistant|>") && Contains(src, "<|end|>")) return ChatTemplate::kPhi3;
  if (Contains(src, "<｜Assistant｜>") && Contains(src, "<｜User｜>"))
    return ChatTemplate::kDeepSeek3;
  if (Contains(src, "'Assistant: ' + message['content'] + eos_token")) {
    return ChatTemplate::kDeepSeek;
  }
  if (Contains(src, "[INST]")) {
    return Contains(src, "<<SYS>>") ? ChatTemplate::kLlama2 : ChatTemplate::kMistral;
  }
  return Status::Unsupported(
      "the model's chat template is not one tandem recognises; choose one by name (supported: " +
      SupportedChatTemplates() + ")");
}

Result<std::string> RenderChat(ChatTemplate t, std::span<const ChatMessage> messages,
                               bool add_generation_prompt) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return Status::InvalidArgument("chat message role \"" + m.role +
                                     "\" is not one of system, user, assistant");
    }
  }
  const bool gen = add_generation_prompt;
  switch (t) {
    case ChatTemplate::kChatMl:
      return RenderChatMl(messages, gen);
    case ChatTemplate::kLlama2:
      return RenderLlama2(messages);  // ends with [/INST] already
    case ChatTemplate::kLlama3:
      return RenderLlama3(messages, gen);
    case ChatTemplate::kMistral:
      return RenderMistral(messages);
    case ChatTemplate::kGemma:
      return RenderGemma(messages, gen);
    case ChatTemplate::kPhi3:
      return RenderPhi3(messages, gen);
    case ChatTemplate::kDeepSeek:
      return RenderDeepSeek(messages, gen);
    case ChatTemplate::kDeepSeek3:
      return RenderDeepSeek3(messages, gen);
  }
  return Status::Internal("unhandled chat template");
}

}  // namespace tandem::tokenizer
