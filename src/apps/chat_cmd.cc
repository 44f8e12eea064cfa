// `tandem chat`: an interactive conversation in the model's chat template, with history.
// Ctrl-C stops the reply being generated; /exit (or end of input) quits.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"
#include "tokenizer/chat_template.h"

namespace tandem::apps {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

}  // namespace

void RegisterChat(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    std::string system;
    std::string chat_template;
    engine::GenerateOptions gen;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "Talk with a model in its chat template");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  AddSpeculationFlags(cmd, &a->model.speculation);
  cmd->add_option("--system", a->system, "System message");
  cmd->add_option("--chat-template", a->chat_template,
                  "Template name (default: from the model, else chatml): " +
                      tokenizer::SupportedChatTemplates());
  cmd->add_option("-n,--n-predict", a->gen.n_predict, "Most tokens per reply (-1: until the end of turn)")
      ->capture_default_str();
  cmd->add_option("--stop", a->gen.stop, "Stop string that ends a reply (repeatable)");
  AddSamplingFlags(cmd, &a->gen.sampling);
  cmd->callback([a, exit_code] {
    if (HandleDryRun(a->model, a->dist, exit_code)) return;
    std::unique_ptr<engine::Engine> e = OpenEngineOrReport(a->model, a->dist, exit_code);
    if (e == nullptr) return;
    engine::Engine& eng = *e;
    Result<tokenizer::ChatTemplate> tmpl = ChooseChatTemplate(a->chat_template, eng, false);
    if (!tmpl.ok()) {
      *exit_code = ReportError(tmpl.status().ToString() + " (choose one with --chat-template)");
      return;
    }
    std::vector<tokenizer::ChatMessage> history;
    if (!a->system.empty()) history.push_back({"system", a->system});
    // No SA_RESTART: a Ctrl-C at the prompt interrupts the read, so a fresh prompt can be shown.
    struct sigaction sa = {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    std::fprintf(stderr, "chat template: %s. Type /exit to quit; Ctrl-C stops a reply.\n",
                 std::string(tokenizer::ChatTemplateName(*tmpl)).c_str());
    std::string line;
    while (true) {
      std::printf("\n> ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) {
        if (g_interrupted != 0) {  // Ctrl-C at the prompt: a fresh prompt, not an exit
          clearerr(stdin);  // the interrupted read left stdin's error flag set
          std::cin.clear();
          g_interrupted = 0;
          continue;
        }
        break;  // end of input
      }
      g_interrupted = 0;  // a Ctrl-C at the prompt does not stop the next reply
      if (line == "/exit" || line == "/quit") break;
      if (line.empty()) continue;
      history.push_back({"user", line});
      Result<std::string> prompt = tokenizer::RenderChat(*tmpl, history, true);
      if (!prompt.ok()) {
        *exit_code = ReportError(prompt.status().ToString());
        return;
      }
      std::string reply;
      Result<engine::GenerateStats> st = eng.Generate(*prompt, a->gen, [&](std::string_view t) {
        reply += t;
        std::fwrite(t.data(), 1, t.size(), stdout);
        std::fflush(stdout);
        return g_interrupted == 0;
      });
      std::printf("\n");
      if (!st.ok()) {
        // A full context ends this conversation's growth but not the program: say so and go on.
        std::fprintf(stderr, "tandem: error: %s\n", st.status().ToString().c_str());
        history.pop_back();
        continue;
      }
      history.push_back({"assistant", reply});
    }
    std::signal(SIGINT, SIG_DFL);
  });
}

}  // namespace tandem::apps
