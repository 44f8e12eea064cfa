// Flags of the commands that can run a model over workers (run, chat, logits, bench), and the
// executor they select: the model on this machine alone, or a pipeline over `--worker`s.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/model_flags.h"
#include "engine/engine.h"
#include "pipeline/executor_factory.h"
#include "tokenizer/chat_template.h"
#include "exec/executor.h"
#include "net/auth.h"

namespace tandem::apps {

struct DistFlags {
  std::vector<std::string> workers;  // --worker HOST:PORT (repeatable) or --rpc a,b
  std::string tensor_split;
  std::string layers;
  std::string key_file;
  std::vector<std::string> standby;  // --standby HOST:PORT (repeatable)
  std::string plan = "auto";         // --plan auto|memory
  bool no_resume = false;
  bool dry_run = false;
};

// --worker HOST[:PORT] (repeatable) and --rpc A,B (llama.cpp's spelling), both into `workers`, in
// the "Distributed" group. `workers` must outlive the parse.
inline void AddWorkerFlags(CLI::App* cmd, std::vector<std::string>* workers) {
  cmd->add_option("--worker", *workers, "A worker HOST[:PORT] (repeat, in pipeline order)")
      ->take_all()->group("Distributed");
  cmd->add_option_function<std::string>(
         "--rpc",
         [workers](const std::string& s) {
           std::stringstream ss(s);
           for (std::string w; std::getline(ss, w, ',');) {
             if (!w.empty()) workers->push_back(w);
           }
         },
         "Workers as one comma-separated list (llama.cpp's spelling)")
      ->group("Distributed");
}

inline void AddDistFlags(CLI::App* cmd, DistFlags* f) {
  AddWorkerFlags(cmd, &f->workers);
  cmd->add_option("--tensor-split,--ts", f->tensor_split,
                  "Layer proportions per node, main first, e.g. 1,1,2 (default: by free memory)")
      ->group("Distributed");
  cmd->add_option("--layers", f->layers, "Explicit layer ranges per node, e.g. 0-7,8-15,16-21")
      ->group("Distributed");
  cmd->add_option("--plan", f->plan,
                  "Placement without --tensor-split/--layers: auto (by measured speed and round trip, "
                  "leaving out workers that do not pay; the memory plan unless clearly faster) or memory "
                  "(by free memory, every worker)")
      ->check(CLI::IsMember({"auto", "memory"}))->group("Distributed");
  cmd->add_option("--auth-key-file", f->key_file, "Pre-shared key file of the workers")
      ->group("Distributed");
  cmd->add_option("--standby", f->standby,
                  "A worker HOST[:PORT] that joins the pipeline only when another fails (repeat)")
      ->take_all()->group("Distributed");
  cmd->add_flag("--no-resume", f->no_resume,
                "When a worker fails, stop with an error naming it instead of going on over the rest")
      ->group("Distributed");
  cmd->add_flag("--dry-run", f->dry_run,
                "Print the placement plan (nodes, layers, weight and KV bytes) and exit without loading")
      ->group("Distributed");
}

// ExecutorOptions from the model and distributed flags; InvalidArgument for a bad split or an
// unreadable key.
inline Result<pipeline::ExecutorOptions> ToExecutorOptions(const ModelFlags& m, const DistFlags& f) {
  pipeline::ExecutorOptions c;
  c.workers = f.workers;
  c.standby = f.standby;
  c.resume = !f.no_resume;
  if (!f.standby.empty() && f.workers.empty()) {
    return Status::InvalidArgument("--standby needs at least one --worker (a standby joins a pipeline when a worker fails)");
  }
  c.n_ctx = m.n_ctx;
  c.threads = m.threads;
  c.ubatch = MicroBatch(m);
  TANDEM_ASSIGN_OR_RETURN(c.context, ToContextOptions(m));
  c.use_mmap = m.use_mmap;
  c.plan.layers = f.layers;
  c.plan.mode = f.plan == "memory" ? pipeline::PlanMode::kMemory : pipeline::PlanMode::kAuto;
  if (!f.tensor_split.empty()) {
    TANDEM_ASSIGN_OR_RETURN(c.plan.tensor_split, pipeline::ParseTensorSplit(f.tensor_split));
  }
  if (!f.key_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(net::Key k, net::LoadKeyFile(f.key_file));
    c.key = k;
  }
  return c;
}

// --dry-run: prints the plan for these flags (asking the workers for their free memory) without
// loading any weights.
inline Status DryRun(const std::string& model_path, const pipeline::ExecutorOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(model::Model m, model::Model::Load(model_path));
  pipeline::ExecutorOptions clamped = o;
  clamped.n_ctx = std::min(o.n_ctx, m.params().n_ctx_train);
  TANDEM_ASSIGN_OR_RETURN(std::string plan, pipeline::DescribePlan(m, clamped));
  std::printf("%s", plan.c_str());
  return Status::Ok();
}

// For the commands' callbacks: true when --dry-run was given and handled (the plan printed, or
// the error reported in *exit_code).
inline bool HandleDryRun(const ModelFlags& m, const DistFlags& d, int* exit_code) {
  if (!d.dry_run) return false;
  Result<pipeline::ExecutorOptions> o = ToExecutorOptions(m, d);
  Status st = o.ok() ? DryRun(m.model, *o) : o.status();
  if (!st.ok()) *exit_code = ReportError(st.ToString());
  return true;
}

// EngineOptions for the model flags plus the workers, if any.
inline Result<engine::EngineOptions> ToEngineOptions(const ModelFlags& m, const DistFlags& d) {
  engine::EngineOptions e;
  e.model_path = m.model;
  TANDEM_ASSIGN_OR_RETURN(e.exec, ToExecutorOptions(m, d));
  e.speculation = m.speculation;
  return e;
}

// The engine for the model and distributed flags (this machine alone, or over the workers); on
// an error, reports it and sets *exit_code, and returns null.
inline std::unique_ptr<engine::Engine> OpenEngineOrReport(const ModelFlags& m, const DistFlags& d, int* exit_code) {
  Result<engine::EngineOptions> eo = ToEngineOptions(m, d);
  if (!eo.ok()) {
    *exit_code = ReportError(eo.status().ToString());
    return nullptr;
  }
  Result<std::unique_ptr<engine::Engine>> e = engine::Engine::Open(*eo);
  if (!e.ok()) {
    *exit_code = ReportError(e.status().ToString());
    return nullptr;
  }
  return std::move(e).value();
}

// The chat template: --chat-template `name` if given, else the model's own, else ChatML. A model
// template that tandem does not know is an error unless `fallback_to_chatml` (then ChatML, with
// a line on stderr saying so).
inline Result<tokenizer::ChatTemplate> ChooseChatTemplate(const std::string& name, const engine::Engine& e,
                                                          bool fallback_to_chatml) {
  if (!name.empty()) return tokenizer::ChatTemplateFromName(name);
  const auto& src = e.tokenizer().vocab().chat_template();
  if (!src) return tokenizer::ChatTemplate::kChatMl;
  Result<tokenizer::ChatTemplate> t = tokenizer::DetectChatTemplate(*src);
  if (t.ok() || !fallback_to_chatml) return t;
  std::fprintf(stderr, "tandem: the model's chat template is not one tandem knows; using chatml "
                       "(--chat-template picks another)\n");
  return tokenizer::ChatTemplate::kChatMl;
}

}  // namespace tandem::apps
