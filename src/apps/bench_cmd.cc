// `tandem bench`: prompt processing (pp) and generation (tg) speed, as a table like llama-bench's
// or as JSON.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/commands.h"
#include "apps/model_flags.h"

namespace tandem::apps {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds to process n prompt tokens in batches (fresh cache), or to generate n tokens one at a
// time (fresh cache), with random token ids.
Result<double> TimeRun(model::Context& ctx, int64_t n_vocab, int64_t n, int64_t n_batch, bool generate) {
  std::mt19937 rng(1);
  ctx.cache().Clear();
  model::Batch b;
  const auto t0 = Clock::now();
  const int64_t step = generate ? 1 : n_batch;
  for (int64_t i = 0; i < n; i += step) {
    b.Clear();
    for (int64_t j = i; j < std::min(n, i + step); ++j) {
      b.Add(static_cast<int32_t>(rng() % n_vocab), static_cast<int32_t>(j), 0, j + 1 == std::min(n, i + step));
    }
    TANDEM_RETURN_IF_ERROR(ctx.Decode(b));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    int64_t pp = 512, tg = 128;
    int reps = 3;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  AddModelFlags(cmd, &a->model);
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
    model::Context ctx(*m, std::max<int64_t>(a->pp, a->tg) + 16, a->model.threads);
    const int64_t n_vocab = m->params().n_vocab;
    nlohmann::json out = nlohmann::json::array();
    const std::string name = std::filesystem::path(a->model.model).filename().string();
    if (!a->json) {
      std::printf("| %-28s | %10s | %7s | %8s | %12s |\n", "model", "size", "threads", "test", "t/s");
      std::printf("| %-28s | %10s | %7s | %8s | %12s |\n", "---", "---", "---", "---", "---");
    }
    for (bool generate : {false, true}) {
      const int64_t n = generate ? a->tg : a->pp;
      if (n <= 0) continue;
      if (Result<double> warm = TimeRun(ctx, n_vocab, generate ? 4 : std::min<int64_t>(n, 32), a->model.n_batch, generate); !warm.ok()) {
        *exit_code = ReportError(warm.status().ToString());
        return;
      }
      std::vector<double> tps;
      for (int r = 0; r < a->reps; ++r) {
        Result<double> s = TimeRun(ctx, n_vocab, n, a->model.n_batch, generate);
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
      if (a->json) {
        out.push_back({{"model", name}, {"test", test}, {"threads", a->model.threads},
                       {"tokens_per_s", mean}, {"stddev", std::sqrt(var)}, {"samples", tps}});
      } else {
        char size[32];
        std::snprintf(size, sizeof size, "%.2f GiB", m->weight_bytes() / 1073741824.0);
        std::printf("| %-28s | %10s | %7d | %8s | %6.2f ± %4.2f |\n", name.c_str(), size,
                    a->model.threads, test.c_str(), mean, std::sqrt(var));
      }
    }
    if (a->json) std::puts(out.dump(2).c_str());
  });
}

}  // namespace tandem::apps
