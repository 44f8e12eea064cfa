// `tandem logits`: all prompt positions in one batch, then greedy tokens, as JSON in the format
// of ../shared/reference/logits.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"

namespace tandem::apps {

void RegisterLogits(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    std::string prompt;
    int greedy = 32;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "Print the logits of every prompt position as JSON");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt (BOS is added; special tokens are text)")
      ->required();
  cmd->add_option("--greedy", a->greedy, "Greedy tokens to generate after the prompt")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->callback([a, exit_code] {
    if (HandleDryRun(a->model, a->dist, exit_code)) return;
    auto fail = [&](const Status& s) { *exit_code = ReportError(s.ToString()); };
    Result<engine::EngineOptions> eo = ToEngineOptions(a->model, a->dist);
    if (!eo.ok()) return fail(eo.status());
    Result<std::unique_ptr<engine::Engine>> e = engine::Engine::Open(*eo);
    if (!e.ok()) return fail(e.status());
    engine::Engine& eng = **e;
    Result<std::vector<int32_t>> tokens = eng.tokenizer().Encode(a->prompt, {true, false});
    if (!tokens.ok()) return fail(tokens.status());
    if (tokens->empty()) return fail(Status::InvalidArgument("the prompt gives no tokens"));
    exec::Executor& ex = eng.executor();
    const int64_t n_vocab = eng.model().params().n_vocab;
    if (static_cast<int64_t>(tokens->size()) + a->greedy > ex.n_ctx()) {
      return fail(Status::OutOfRange("prompt and greedy tokens exceed the context (raise -c)"));
    }
    model::Batch batch;
    for (size_t i = 0; i < tokens->size(); ++i) {
      batch.Add((*tokens)[i], static_cast<int32_t>(i), 0, true);
    }
    exec::RunOptions ro;
    ro.logits = true;
    exec::RunOutput out;
    if (Status s = ex.Run(batch, ro, &out); !s.ok()) return fail(s);
    nlohmann::json logits = nlohmann::json::array();
    for (int64_t p = 0; p < out.n_rows; ++p) {
      const float* row = out.logits + p * n_vocab;
      logits.push_back(std::vector<float>(row, row + n_vocab));
    }
    // Greedy continuation: the highest logit (first on ties), computed here from the logits.
    std::vector<int32_t> greedy;
    int32_t pos = static_cast<int32_t>(tokens->size());
    const float* last = out.logits + (out.n_rows - 1) * n_vocab;
    int32_t next = static_cast<int32_t>(std::max_element(last, last + n_vocab) - last);
    for (int g = 0; g < a->greedy; ++g) {
      greedy.push_back(next);
      batch.Clear();
      batch.Add(next, pos++, 0, true);
      if (Status s = ex.Run(batch, ro, &out); !s.ok()) return fail(s);
      next = static_cast<int32_t>(std::max_element(out.logits, out.logits + n_vocab) - out.logits);
    }
    nlohmann::json j;
    j["model"] = std::filesystem::path(a->model.model).filename().string();
    j["prompt"] = a->prompt;
    j["add_bos"] = !tokens->empty() && (*tokens)[0] == eng.tokenizer().vocab().bos();
    j["flash_attn"] = a->model.flash_attn;
    j["n_vocab"] = n_vocab;
    j["prompt_tokens"] = *tokens;
    j["logits"] = std::move(logits);
    j["greedy"] = greedy;
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  });
}

}  // namespace tandem::apps
