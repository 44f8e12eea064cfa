// `tandem run`: stream a continuation of a prompt to stdout; speeds to stderr.
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"

namespace tandem::apps {

void RegisterRun(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    std::string prompt;
    std::string prompt_file;
    engine::GenerateOptions gen;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "Generate a continuation of a prompt");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  AddSpeculationFlags(cmd, &a->model.speculation);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt (empty: start from BOS alone)");
  cmd->add_option("-f,--file", a->prompt_file, "Read the prompt from this file")->excludes("--prompt");
  cmd->add_flag("--ignore-eos", a->gen.ignore_eos,
                "Never end at the end-of-sequence token (it is never sampled); stop at -n");
  cmd->add_option("-n,--n-predict", a->gen.n_predict, "Tokens to generate (-1: until EOS)")
      ->capture_default_str();
  cmd->add_option("--stop", a->gen.stop, "Stop string (repeatable)");
  AddSamplingFlags(cmd, &a->gen.sampling);
  cmd->callback([a, exit_code] {
    if (HandleDryRun(a->model, a->dist, exit_code)) return;
    if (!a->prompt_file.empty()) {
      Result<std::string> text = ReadTextFile(a->prompt_file);
      if (!text.ok()) {
        *exit_code = ReportError(text.status().ToString());
        return;
      }
      a->prompt = std::move(*text);
    }
    std::unique_ptr<engine::Engine> e = OpenEngineOrReport(a->model, a->dist, exit_code);
    if (e == nullptr) return;
    Result<engine::GenerateStats> st = e->Generate(a->prompt, a->gen, [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);  // before the speeds on stderr, so that a shared pipe keeps the order
    if (!st.ok()) {
      *exit_code = ReportError(st.status().ToString());
      return;
    }
    std::fprintf(stderr, "prompt: %lld tokens, %.2f tokens/s; generation: %lld tokens, %.2f tokens/s (%s)\n",
                 static_cast<long long>(st->prompt_tokens),
                 st->prompt_tokens / std::max(st->prompt_seconds, 1e-9),
                 static_cast<long long>(st->generated_tokens),
                 st->generated_tokens / std::max(st->generate_seconds, 1e-9),
                 st->stop_reason.c_str());
    if (!st->drafter.empty()) std::fprintf(stderr, "%s\n", st->speculation.ToString(st->drafter).c_str());
  });
}

}  // namespace tandem::apps
