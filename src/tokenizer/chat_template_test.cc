#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::tokenizer {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "2+2?"},
};

std::string Render(std::string_view name, const std::vector<ChatMessage>& m = kChat,
                   bool gen = true) {
  Result<ChatTemplate> t = ChatTemplateFromName(name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  Result<std::string> s = RenderChat(*t, m, gen);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : "";
}

TEST(ChatTemplateTest, ChatMl) {
  EXPECT_EQ(Render("chatml"),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render("chatml", {{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, Llama2) {
  EXPECT_EQ(Render("llama2"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
            "<s>[INST] 2+2? [/INST]");
}

TEST(ChatTemplateTest, Llama3) {
  EXPECT_EQ(Render("llama3"),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, Mistral) {
  EXPECT_EQ(Render("mistral"), "[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] 2+2? [/INST]");
}

TEST(ChatTemplateTest, Gemma) {
  EXPECT_EQ(Render("gemma"),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(ChatTemplateTest, Phi3) {
  EXPECT_EQ(Render("phi3"),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
            "<|user|>\n2+2?<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, DeepSeek) {
  EXPECT_EQ(Render("deepseek"),
            "Be brief.\n\nUser: Hi\n\nAssistant: Hello!<｜end▁of▁sentence｜>User: 2+2?\n\n"
            "Assistant:");
}

TEST(ChatTemplateTest, DeepSeek3) {
  EXPECT_EQ(Render("deepseek3"),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>2+2?"
            "<｜Assistant｜>");
}

TEST(ChatTemplateTest, TrimsWhereTheFamilyTrims) {
  EXPECT_EQ(Render("llama3", {{"user", "  Hi \n"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_EQ(Render("chatml", {{"user", " Hi "}}, false), "<|im_start|>user\n Hi <|im_end|>\n");
}

TEST(ChatTemplateTest, DetectsFamiliesFromTheirTemplates) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
       "chatml"},
      {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", "llama3"},
      {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
       "gemma"},
      {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + "
       "'\\n'}}",
       "phi3"},
      {"{{'<｜User｜>' + message['content']}}{{'<｜Assistant｜>' + content + "
       "'<｜end▁of▁sentence｜>'}}",
       "deepseek3"},
      {"{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' "
       "%}{{ 'Assistant: ' + message['content'] + eos_token }}",
       "deepseek"},
      {"{{ bos_token + '[INST] ' + (system_message ~ '<<SYS>>\\n') + content + ' [/INST]' }}",
       "llama2"},
      {"{{ '[INST] ' + message['content'] + ' [/INST]' }}", "mistral"},
  };
  for (const auto& [src, name] : cases) {
    Result<ChatTemplate> t = DetectChatTemplate(src);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_EQ(ChatTemplateName(*t), name);
  }
}

TEST(ChatTemplateTest, UnknownNamesAndTemplatesAreClearErrors) {
  Result<ChatTemplate> n = ChatTemplateFromName("vicuna");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kInvalidArgument);
  EXPECT_NE(n.status().message().find("vicuna"), std::string::npos);
  EXPECT_NE(n.status().message().find("chatml, llama2, llama3"), std::string::npos);
  Result<ChatTemplate> d = DetectChatTemplate("{{ 'USER: ' + message['content'] }}");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kUnsupported);
  EXPECT_NE(d.status().message().find("deepseek3"), std::string::npos);
}

TEST(ChatTemplateTest, RejectsUnknownRoles) {
  const std::vector<ChatMessage> m = {{"tool", "x"}};
  Result<std::string> r = RenderChat(ChatTemplate::kChatMl, m, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::tokenizer

namespace tandem::tokenizer {
namespace {

// Excerpts of the templates that Gemma 3 and Qwen3 files carry: Gemma 3 folds the system message
// into the first user turn and calls the assistant "model"; Qwen3 is ChatML with thinking blocks.
TEST(ChatTemplateTest, Gemma3AndQwen3TemplatesAreRecognised) {
  const std::string gemma3 =
      "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n{%- set first_user_prefix = "
      "messages[0]['content'] + '\\n\\n' -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
      "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- endif -%}\n"
      "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
      "{{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}";
  const std::string qwen3 =
      "{%- for message in messages %}{%- if message.role == \"user\" %}{{- '<|im_start|>' + message.role + "
      "'\\n' + message.content + '<|im_end|>' + '\\n' }}{%- elif message.role == \"assistant\" %}"
      "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  Result<ChatTemplate> g = DetectChatTemplate(gemma3);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(ChatTemplateName(*g), "gemma");
  Result<ChatTemplate> q = DetectChatTemplate(qwen3);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(ChatTemplateName(*q), "chatml");
}

}  // namespace
}  // namespace tandem::tokenizer
