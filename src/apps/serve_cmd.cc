// `tandem serve`: the OpenAI-compatible HTTP server (server/server.h) on this machine alone or on
// a pipeline over workers, with continuous batching (engine/scheduler.h).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"
#include "engine/scheduler.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"

namespace tandem::apps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    server::ServerOptions server;
    engine::SchedulerOptions sched;
    std::string api_key_file;
    std::string chat_template;
    std::string alias;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  AddSpeculationFlags(cmd, &a->model.speculation);
  cmd->add_option("--host", a->server.host, "Address to listen on")->capture_default_str()->group("Server");
  cmd->add_option("--port", a->server.port, "Port")->capture_default_str()->check(CLI::Range(0, 65535))->group("Server");
  cmd->add_option("--api-key", a->server.api_key, "API key clients must send (Authorization: Bearer KEY)")
      ->group("Server");
  cmd->add_option("--api-key-file", a->api_key_file, "Read the API key from this file (first line)")
      ->excludes("--api-key")->group("Server");
  cmd->add_option("--parallel,--np", a->sched.n_slots,
                  "Sequences decoded together (-np); each gets ctx-size / parallel cells of context")
      ->capture_default_str()->check(CLI::Range(1, 256))->group("Server");
  cmd->add_option("--max-queue", a->sched.max_queue, "Requests that may wait for a slot; more get 503")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20))->group("Server");
  cmd->add_option("--pipeline-groups", a->sched.groups,
                  "Groups of requests in flight through the pipeline at once (0: one per stage)")
      ->capture_default_str()->check(CLI::Range(0, 256))->group("Server");
  cmd->add_option("--chat-template", a->chat_template,
                  "Template name (default: from the model, else chatml): " + tokenizer::SupportedChatTemplates())
      ->group("Server");
  AddSamplingFlags(cmd, &a->server.sampling);
  cmd->add_option("-n,--n-predict", a->server.n_predict,
                  "Most tokens per reply when a request gives no max_tokens (-1: to an end token or the end of its slot)")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 24))->group("Server");
  cmd->add_flag("--ignore-eos", a->server.ignore_eos,
                "Generate past end-of-generation tokens unless a request sets \"ignore_eos\": false")
      ->group("Server");
  cmd->add_option("--alias", a->alias, "Model id for /v1/models and responses (default: the file name)")
      ->group("Server");
  cmd->callback([a, exit_code] {
    if (HandleDryRun(a->model, a->dist, exit_code)) return;
    // The requests' default sampling, checked before the model loads.
    if (Result<sampling::Sampler> s = sampling::Sampler::Create(a->server.sampling); !s.ok()) {
      *exit_code = ReportError(s.status().ToString());
      return;
    }
    if (!a->api_key_file.empty()) {
      Result<std::string> key = ReadTextFile(a->api_key_file);
      if (!key.ok()) {
        *exit_code = ReportError(key.status().ToString());
        return;
      }
      std::string k = key->substr(0, key->find_first_of("\r\n"));
      if (k.empty()) {
        *exit_code = ReportError("the API key file " + a->api_key_file + " is empty");
        return;
      }
      a->server.api_key = std::move(k);
    }
    std::unique_ptr<engine::Engine> e = OpenEngineOrReport(a->model, a->dist, exit_code);
    if (e == nullptr) return;
    engine::Engine& eng = *e;
    Result<tokenizer::ChatTemplate> tmpl = ChooseChatTemplate(a->chat_template, eng, true);
    if (!tmpl.ok()) {
      *exit_code = ReportError(tmpl.status().ToString());
      return;
    }
    a->server.chat_template = *tmpl;
    a->server.model_name = a->alias.empty() ? std::filesystem::path(a->model.model).filename().string() : a->alias;
    for (const exec::StageInfo& s : eng.executor().stages()) a->server.stage_names.push_back(s.node);
    a->sched.n_ctx = eng.executor().n_ctx();
    engine::Engine* ep = &eng;
    a->sched.reopen = [ep] { return ep->OpenExecutor(); };
    a->sched.drafter = eng.drafter();
    a->sched.draft_min = a->model.speculation.draft_min;
    a->sched.draft_max = a->model.speculation.draft_max;
    engine::Scheduler sched(eng.TakeExecutor(), eng.tokenizer(), [ep](int32_t t) { return ep->IsEndOfGeneration(t); },
                            a->sched);
    server::Server srv(eng.tokenizer(), sched, a->server);
    if (Status st = srv.Bind(); !st.ok()) {
      *exit_code = ReportError(st.ToString());
      return;
    }
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread stopper([&srv] {
      while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      srv.Stop();
    });
    std::printf("tandem serve: listening on http://%s:%d (model %s, %d slots of %lld tokens, chat template %s%s)\n",
                a->server.host.c_str(), srv.port(), a->server.model_name.c_str(), sched.n_slots(),
                static_cast<long long>(sched.slot_ctx()), std::string(tokenizer::ChatTemplateName(*tmpl)).c_str(),
                a->server.api_key.empty() ? ", no API key" : ", API key required");
    std::fflush(stdout);
    srv.Serve();
    g_stop = true;
    stopper.join();
    std::fprintf(stderr, "tandem serve: stopped\n");
  });
}

}  // namespace tandem::apps
