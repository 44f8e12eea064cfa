// Chat templates: a conversation rendered as the prompt text a chat model was trained on.
//
// There is no Jinja engine. The template in a file's tokenizer.chat_template is recognised by
// substrings that only its family uses, and the family's format is written out here:
//
//   chatml     <|im_start|>{role}\n{content}<|im_end|>\n ...  <|im_start|>assistant\n
//              (Qwen, Qwen2, Qwen2.5, Qwen3 and many fine-tunes)
//   llama2     [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   llama3     <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//              <|start_header_id|>assistant<|end_header_id|>\n\n
//   mistral    [INST] {user} [/INST]{assistant}</s>[INST] ...   (Mistral 7B Instruct v0.1/v0.2)
//   gemma      <start_of_turn>user\n{content}<end_of_turn>\n ...  <start_of_turn>model\n
//   phi3       <|system|>\n{content}<|end|>\n<|user|>\n{content}<|end|>\n<|assistant|>\n
//   deepseek   {system}\n\nUser: {user}\n\nAssistant: {assistant}<｜end▁of▁sentence｜>
//              ... Assistant:   (DeepSeek LLM and V2 chat)
//   deepseek3  {system}<｜User｜>{user}<｜Assistant｜>{assistant}<｜end▁of▁sentence｜>
//              ... <｜Assistant｜>   (DeepSeek V3, R1 and the R1 distills)
//
// The text starts after the BOS token, which the tokenizer adds; it holds special tokens in
// written form, so tokenize it with parse_special. Roles are "system", "user" and "assistant";
// families without a system role put the system text before the first user message. Content is
// trimmed where the family's own template trims it (llama2, llama3, gemma).
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tandem::tokenizer {

enum class ChatTemplate {
  kChatMl,
  kLlama2,
  kLlama3,
  kMistral,
  kGemma,
  kPhi3,
  kDeepSeek,
  kDeepSeek3
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

std::string_view ChatTemplateName(ChatTemplate t);
// "chatml, llama2, ..." for messages and help texts.
std::string SupportedChatTemplates();

// By name, as for a --chat-template flag. InvalidArgument naming the supported ones otherwise.
Result<ChatTemplate> ChatTemplateFromName(std::string_view name);
// From the Jinja source in tokenizer.chat_template. Unsupported if no family is recognised.
Result<ChatTemplate> DetectChatTemplate(std::string_view jinja_source);

// The prompt for `messages`, ending with the assistant's turn header if `add_generation_prompt`.
// InvalidArgument for an unknown role.
Result<std::string> RenderChat(ChatTemplate t, std::span<const ChatMessage> messages,
                               bool add_generation_prompt);

}  // namespace tandem::tokenizer
