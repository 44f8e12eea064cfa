// Flags of the commands that can run a model over workers (run, chat, logits, bench), and the
// executor they select: the model on this machine alone, or a pipeline over `--worker`s.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/model_flags.h"
#include "pipeline/coordinator.h"
#include "exec/executor.h"
#include "net/auth.h"

namespace tandem::apps {

struct DistFlags {
  std::vector<std::string> workers;  // --worker HOST:PORT (repeatable) or --rpc a,b
  std::string tensor_split;
  std::string layers;
  int64_t ubatch = 128;
  std::string key_file;
};

inline void AddDistFlags(CLI::App* cmd, DistFlags* f) {
  cmd->add_option("--worker", f->workers, "A worker HOST[:PORT] (repeat, in pipeline order)")
      ->take_all()->group("Distributed");
  cmd->add_option_function<std::string>(
         "--rpc",
         [f](const std::string& s) {
           std::stringstream ss(s);
           for (std::string w; std::getline(ss, w, ',');) {
             if (!w.empty()) f->workers.push_back(w);
           }
         },
         "Workers as one comma-separated list (llama.cpp's spelling)")
      ->group("Distributed");
  cmd->add_option("--tensor-split,--ts", f->tensor_split,
                  "Layer proportions per node, main first, e.g. 1,1,2 (default: by free memory)")
      ->group("Distributed");
  cmd->add_option("--layers", f->layers, "Explicit layer ranges per node, e.g. 0-7,8-15,16-21")
      ->group("Distributed");
  cmd->add_option("--ubatch-size,--ub", f->ubatch, "Prompt tokens per pipeline micro-batch")
      ->capture_default_str()->check(CLI::Range(1, 4096))->group("Distributed");
  cmd->add_option("--auth-key-file", f->key_file, "Pre-shared key file of the workers")
      ->group("Distributed");
}

// ClusterOptions from the flags; InvalidArgument for a bad split or an unreadable key.
inline Result<pipeline::ClusterOptions> ToClusterOptions(const DistFlags& f, int64_t n_ctx, int threads) {
  pipeline::ClusterOptions c;
  c.workers = f.workers;
  c.n_ctx = n_ctx;
  c.threads = threads;
  c.ubatch = f.ubatch;
  c.plan.layers = f.layers;
  if (!f.tensor_split.empty()) {
    TANDEM_ASSIGN_OR_RETURN(c.plan.tensor_split, pipeline::ParseTensorSplit(f.tensor_split));
  }
  if (!f.key_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(net::Key k, net::LoadKeyFile(f.key_file));
    c.key = k;
  }
  return c;
}

// EngineOptions for the model flags plus the workers, if any.
inline Result<engine::EngineOptions> ToEngineOptions(const ModelFlags& m, const DistFlags& d) {
  engine::EngineOptions e = ToEngineOptions(m);
  if (!d.workers.empty()) {
    TANDEM_ASSIGN_OR_RETURN(e.cluster, ToClusterOptions(d, m.n_ctx, m.threads));
  }
  return e;
}

}  // namespace tandem::apps
