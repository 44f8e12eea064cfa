// `tandem bench`: prompt processing (pp) and generation (tg) speed, as a table like llama-bench's
// or as JSON.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"

namespace tandem::apps {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds to process n prompt tokens (fresh cache; the executor splits them into batches), or to
// generate n tokens one at a time (fresh cache, each token sampled greedily and fed back), with
// random token ids. For generation, adds each stage's compute milliseconds to *stage_ms.
Result<double> TimeRun(exec::Executor& ex, int64_t n_vocab, int64_t n, bool generate,
                       std::vector<double>* stage_ms) {
  std::mt19937 rng(1);
  TANDEM_RETURN_IF_ERROR(ex.Clear());
  model::Batch b;
  exec::RunOutput out;
  const auto t0 = Clock::now();
  if (!generate) {
    for (int64_t j = 0; j < n; ++j) {
      b.Add(static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(j), 0, j + 1 == n);
    }
    exec::RunOptions o;
    o.logits = true;  // the last position's logits: the run is complete when they arrive
    TANDEM_RETURN_IF_ERROR(ex.Run(b, o, &out));
  } else {
    exec::RunOptions first;
    first.sample = true;
    sampling::SamplerParams greedy;
    greedy.temperature = 0;
    first.sampler = greedy;
    exec::RunOptions step;
    step.sample = true;
    int32_t tok = static_cast<int32_t>(rng() % n_vocab);
    for (int64_t j = 0; j < n; ++j) {
      b.Clear();
      b.Add(tok, static_cast<int32_t>(j), 0, true);
      TANDEM_RETURN_IF_ERROR(ex.Run(b, j == 0 ? first : step, &out));
      tok = out.token;
      if (stage_ms->size() < out.stages.size()) stage_ms->resize(out.stages.size());
      for (size_t s = 0; s < out.stages.size(); ++s) (*stage_ms)[s] += out.stages[s].compute_ms;
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    int64_t pp = 512, tg = 128;
    int reps = 3;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  cmd->add_option("-p,--n-prompt", a->pp, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->tg, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", a->reps, "Repetitions")->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, exit_code] {
    // The model alone: benchmarks need no tokenizer (random-weight models may have none).
    Result<model::Model> m = model::Model::Load(a->model.model);
    if (!m.ok()) {
      *exit_code = ReportError(m.status().ToString());
      return;
    }
    const model::ContextOptions copts = ToContextOptions(a->model);
    if (Status s = model::CheckContextOptions(m->params(), copts); !s.ok()) {
      *exit_code = ReportError(s.ToString());
      return;
    }
    const int64_t n_ctx = std::max<int64_t>(a->pp, a->tg) + 16;
    std::unique_ptr<exec::Executor> ex;
    std::vector<std::string> stage_names = {"main"};
    std::vector<std::string> stage_layers;
    if (a->dist.workers.empty()) {
      if (!a->model.use_mmap) {
        if (Status s = m->CopyIntoMemory(0, m->params().n_layer, true); !s.ok()) {
          *exit_code = ReportError(s.ToString());
          return;
        }
      }
      ex = std::make_unique<exec::LocalExecutor>(*m, n_ctx, a->model.threads, a->model.n_batch, copts);
    } else {
      Result<pipeline::ClusterOptions> co = ToClusterOptions(a->dist, n_ctx, a->model.threads);
      if (!co.ok()) {
        *exit_code = ReportError(co.status().ToString());
        return;
      }
      co->context = copts;
      co->use_mmap = a->model.use_mmap;
      Result<std::unique_ptr<pipeline::Coordinator>> c = pipeline::Coordinator::Open(*m, a->model.model, *co);
      if (!c.ok()) {
        *exit_code = ReportError(c.status().ToString());
        return;
      }
      stage_names = (*c)->node_names();
      for (const pipeline::Stage& s : (*c)->plan().stages) {
        stage_layers.push_back(std::to_string(s.layer_begin) + "-" + std::to_string(s.layer_end - 1));
      }
      ex = std::move(*c);
    }
    const int64_t n_vocab = m->params().n_vocab;
    nlohmann::json out = nlohmann::json::array();
    const std::string name = std::filesystem::path(a->model.model).filename().string();
    if (!a->json) {
      std::printf("| %-28s | %10s | %7s | %8s | %12s |\n", "model", "size", "threads", "test", "t/s");
      std::printf("| %-28s | %10s | %7s | %8s | %12s |\n", "---", "---", "---", "---", "---");
    }
    std::vector<double> warm_ms, stage_ms;
    nlohmann::json breakdown;
    std::string breakdown_text;
    for (bool generate : {false, true}) {
      const int64_t n = generate ? a->tg : a->pp;
      if (n <= 0) continue;
      if (Result<double> warm = TimeRun(*ex, n_vocab, generate ? 4 : std::min<int64_t>(n, 32), generate, &warm_ms); !warm.ok()) {
        *exit_code = ReportError(warm.status().ToString());
        return;
      }
      std::vector<double> tps;
      for (int r = 0; r < a->reps; ++r) {
        Result<double> s = TimeRun(*ex, n_vocab, n, generate, &stage_ms);
        if (!s.ok()) {
          *exit_code = ReportError(s.status().ToString());
          return;
        }
        tps.push_back(n / *s);
      }
      double mean = 0, var = 0;
      for (double v : tps) mean += v / tps.size();
      for (double v : tps) var += (v - mean) * (v - mean) / tps.size();
      const std::string test = (generate ? "tg" : "pp") + std::to_string(n);
      if (generate && !stage_layers.empty()) {
        // Per generated token: each stage's compute, and the rest (network and waiting).
        std::vector<double> per_token;
        double sum_tps = 0, compute = 0;
        for (double v : tps) sum_tps += v;
        const double token_ms = 1000.0 / (sum_tps / tps.size());
        char line[256];
        for (size_t st = 0; st < stage_ms.size() && st < stage_layers.size(); ++st) {
          const double ms = stage_ms[st] / (static_cast<double>(a->reps) * n);
          compute += ms;
          breakdown["stages"].push_back({{"node", stage_names[st]}, {"layers", stage_layers[st]}, {"compute_ms", ms}});
          std::snprintf(line, sizeof line, "  stage %zu %-22s layers %-7s compute %7.2f ms/token\n", st,
                        stage_names[st].c_str(), stage_layers[st].c_str(), ms);
          breakdown_text += line;
        }
        breakdown["token_ms"] = token_ms;
        breakdown["network_ms"] = token_ms - compute;
        std::snprintf(line, sizeof line, "  network and waiting            %7.2f ms/token (of %.2f ms/token)\n",
                      token_ms - compute, token_ms);
        breakdown_text += line;
      }
      if (a->json) {
        out.push_back({{"model", name}, {"test", test}, {"threads", a->model.threads},
                       {"flash_attn", a->model.flash_attn}, {"type_k", a->model.cache_type_k},
                       {"type_v", a->model.cache_type_v}, {"tokens_per_s", mean},
                       {"stddev", std::sqrt(var)}, {"samples", tps}});
      } else {
        char size[32];
        std::snprintf(size, sizeof size, "%.2f GiB", m->weight_bytes() / 1073741824.0);
        std::printf("| %-28s | %10s | %7d | %8s | %6.2f ± %4.2f |\n", name.c_str(), size,
                    a->model.threads, test.c_str(), mean, std::sqrt(var));
      }
    }
    if (!breakdown.is_null()) {
      if (a->json) {
        for (auto& row : out) {
          if (row["test"].get<std::string>().rfind("tg", 0) == 0) row["per_token"] = breakdown;
        }
      } else {
        std::printf("\nper generated token, by stage:\n%s", breakdown_text.c_str());
      }
    }
    if (a->json) std::puts(out.dump(2).c_str());
  });
}

}  // namespace tandem::apps
