// `tandem bench`: prompt processing (pp) and generation (tg) speed, as a table like llama-bench's
// or as JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/dist_flags.h"
#include "apps/model_flags.h"
#include "engine/bench.h"
#include "kernels/speed.h"
#include "tokenizer/vocab.h"

namespace tandem::apps {

void RegisterBench(CLI::App& app, int* exit_code) {
  struct Args {
    ModelFlags model;
    DistFlags dist;
    engine::BenchOptions bench;
    bool json = false;
    bool roofline = false;
    bool profile = false;
    int64_t small_batch = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  AddModelFlags(cmd, &a->model);
  AddDistFlags(cmd, &a->dist);
  AddSpeculationFlags(cmd, &a->model.speculation);
  cmd->add_option("-p,--n-prompt", a->bench.n_prompt, "Prompt tokens (0: skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->bench.n_gen, "Generated tokens (0: skip)")->capture_default_str();
  cmd->add_option("-d,--n-depth", a->bench.n_depth,
                  "Tokens already in the cache when each test starts (filled once, untimed): pp and tg at "
                  "that depth, as llama-bench's -d")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("-r,--repetitions", a->bench.repetitions, "Repetitions")->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->add_option("--small-batch", a->small_batch,
                  "Also time a forward of N tokens of one sequence at position 256 against a 1-token step "
                  "there (what speculative verification costs)")
      ->check(CLI::Range(0, 512));
  cmd->add_flag("--roofline", a->roofline,
                "Also measure this machine's memory read bandwidth and show generation against its roofline "
                "(bandwidth / weight bytes read per token)");
  cmd->add_flag("--profile", a->profile,
                "On a GPU: also time each shader of 32 decode steps (Vulkan timestamps) and show where a step's "
                "time goes");
  cmd->callback([a, exit_code] {
    auto fail = [&](const Status& s) { *exit_code = ReportError(s.ToString()); };
    // The model alone: benchmarks need no tokenizer (random-weight models may have none).
    Result<model::Model> m = model::Model::Load(a->model.model);
    if (!m.ok()) return fail(m.status());
    Result<pipeline::ExecutorOptions> xo = ToExecutorOptions(a->model, a->dist);
    if (!xo.ok()) return fail(xo.status());
    // Where a decode step's GPU time goes (--profile): kProfileSteps plain steps, every dispatch timed.
    constexpr int64_t kProfileSteps = 32;
    xo->n_ctx = std::max<int64_t>({a->bench.n_depth + std::max(a->bench.n_prompt, a->bench.n_gen),
                                   a->small_batch > 0 ? 256 + a->small_batch : 0, a->profile ? kProfileSteps : 0}) +
                16;
    if (a->dist.dry_run) {
      if (Status st = DryRun(a->model.model, *xo); !st.ok()) fail(st);
      return;
    }
    Result<std::unique_ptr<exec::Executor>> ex = pipeline::OpenExecutor(*m, a->model.model, *xo);
    if (!ex.ok()) return fail(ex.status());
    // A drafter for generation: prompt lookup needs nothing; a draft model's vocabulary is checked
    // against the model's.
    std::unique_ptr<engine::Drafter> drafter;
    const engine::SpeculationOptions& so = a->model.speculation;
    if (so.enabled()) {
      Result<tokenizer::Vocab> vocab = tokenizer::Vocab::FromGguf(m->file());
      if (!vocab.ok()) return fail(vocab.status().WithContext("speculation needs the model's vocabulary"));
      engine::SpeculationOptions o = so;
      o.threads = a->model.threads;
      o.n_ctx = (*ex)->n_ctx();
      Result<std::unique_ptr<engine::Drafter>> d = engine::OpenDrafter(o, *vocab, a->model.model);
      if (!d.ok()) return fail(d.status());
      drafter = std::move(d).value();
      a->bench.drafter = drafter.get();
      a->bench.speculation = so;
    }
    Result<std::vector<engine::BenchResult>> results = engine::RunBench(**ex, a->bench);
    if (!results.ok()) return fail(results.status());
    std::optional<engine::SmallBatchResult> small;
    if (a->small_batch > 0) {
      Result<engine::SmallBatchResult> sb = engine::RunSmallBatch(**ex, a->small_batch, 256, std::max(5, a->bench.repetitions));
      if (!sb.ok()) return fail(sb.status());
      small = *sb;
    }
    const std::vector<exec::StageInfo> stages = (*ex)->stages();
    const bool split = stages.size() > 1;
    const std::string name = std::filesystem::path(a->model.model).filename().string();
    // What a generated token reads: every stage's weights (experts: only the chosen ones).
    const uint64_t read = m->DecodeWeightBytes(0, m->params().n_layer, true);
    char text[320];
    std::snprintf(text, sizeof text, "weights read per generated token: %.1f MiB", read / 1048576.0);
    std::string summary = text;
    if (m->params().is_moe()) {
      std::snprintf(text, sizeof text, " (%lld of %lld experts per layer; all weights: %.1f MiB)",
                    static_cast<long long>(m->params().n_expert_used), static_cast<long long>(m->params().n_expert),
                    m->weight_bytes() / 1048576.0);
      summary += text;
    }
    // Where this node computes: the CPU, or its last gpu_layers layers (and the head) on a GPU.
    const std::shared_ptr<gpu::Device>& device = xo->context.device;
    const int64_t main_end = stages.empty() ? m->params().n_layer : stages[0].layer_end;
    const int64_t gpu_layers = model::GpuLayerCount(*m, (*ex)->n_ctx(), 0, main_end, xo->context);
    const std::string backend = gpu_layers > 0 ? "Vulkan" : "CPU";
    const std::string device_text =
        gpu_layers > 0 ? device->info().name + " (" + device->info().description + "), " + std::to_string(gpu_layers) +
                             " of " + std::to_string(main_end) + " layers" + (split ? " of this node" : "")
                       : "CPU";
    summary += "\ndevice: " + device_text;
    // The roofline of the memory the weights are read from: the GPU's when every layer is there.
    const bool on_gpu = !split && gpu_layers == m->params().n_layer;
    float gbps = 0;
    if (a->roofline && on_gpu) {
      Result<double> g = gpu::MeasureReadBandwidth(*device);
      if (!g.ok()) return fail(g.status());
      gbps = static_cast<float>(*g);
    } else if (a->roofline) {
      gbps = kernels::MeasureReadBandwidth(a->model.threads);
    }
    const double roof = gbps * 1e9 / static_cast<double>(std::max<uint64_t>(read, 1));
    if (a->roofline && on_gpu) {
      std::snprintf(text, sizeof text, "\nGPU read bandwidth: %.1f GB/s (tandem's read shader, best of 3 passes); roofline %.2f tokens/s",
                    gbps, roof);
      summary += text;
    } else if (a->roofline) {
      std::snprintf(text, sizeof text, "\nmemory read bandwidth: %.1f GB/s (%d threads, best of 5 passes over 2 GiB); roofline %.2f tokens/s",
                    gbps, a->model.threads, roof);
      summary += text;
    }
    std::vector<gpu::Device::ProfileEntry> profile;
    double profile_token_ms = 0;
    if (a->profile) {
      if (gpu_layers == 0) {
        return fail(Status::InvalidArgument("--profile times the GPU's shaders, and this node runs on the CPU "
                                            "(give --device and -ngl)"));
      }
      if (Status st = device->StartProfile(); !st.ok()) return fail(st);
      engine::BenchOptions po;
      po.n_prompt = 0;
      po.n_gen = kProfileSteps;
      po.repetitions = 1;
      Result<std::vector<engine::BenchResult>> pr = engine::RunBench(**ex, po);
      profile = device->StopProfile();
      if (!pr.ok()) return fail(pr.status());
      profile_token_ms = 1000.0 / pr->at(0).mean;
    }
    // Every step ran is in the profile: the warm-up's and the timed ones.
    const double profiled_steps = static_cast<double>(kProfileSteps + engine::kWarmUpSteps);
    double profile_gpu_ms = 0;
    for (const gpu::Device::ProfileEntry& e : profile) profile_gpu_ms += e.ms / profiled_steps;
    nlohmann::json out = nlohmann::json::array();
    std::string breakdown_text;
    int test_width = 8;  // "pp512 @ d4096" is wider
    for (const engine::BenchResult& r : *results) test_width = std::max(test_width, static_cast<int>(r.test.size()));
    if (!a->json) {
      std::printf("| %-28s | %10s | %7s | %7s | %4s | %*s | %12s |\n", "model", "size", "backend", "threads", "ngl",
                  test_width, "test", "t/s");
      std::printf("| %-28s | %10s | %7s | %7s | %4s | %*s | %12s |\n", "---", "---", "---", "---", "---", test_width,
                  "---", "---");
    }
    for (const engine::BenchResult& r : *results) {
      nlohmann::json breakdown;
      if (split && !r.stage_ms.empty()) {
        // Per generated token: each stage's compute, and the rest (network and waiting).
        double compute = 0;
        char line[256];
        for (size_t st = 0; st < r.stage_ms.size() && st < stages.size(); ++st) {
          const std::string layers =
              std::to_string(stages[st].layer_begin) + "-" + std::to_string(stages[st].layer_end - 1);
          compute += r.stage_ms[st];
          const exec::StageInfo& si = stages[st];
          breakdown["stages"].push_back({{"node", si.node}, {"layers", layers}, {"compute_ms", r.stage_ms[st]},
                                         {"predicted_compute_ms", si.predicted_compute_ms},
                                         {"predicted_link_ms", si.predicted_link_ms}});
          std::snprintf(line, sizeof line,
                        "  stage %zu %-22s layers %-7s compute %7.2f ms/token (predicted %.2f, link %.2f)\n", st,
                        si.node.c_str(), layers.c_str(), r.stage_ms[st], si.predicted_compute_ms,
                        si.predicted_link_ms);
          breakdown_text += line;
        }
        double predicted = 0;
        for (const exec::StageInfo& si : stages) predicted += si.predicted_compute_ms + si.predicted_link_ms;
        breakdown["token_ms"] = r.token_ms;
        breakdown["network_ms"] = r.token_ms - compute;
        breakdown["predicted_token_ms"] = predicted;
        std::snprintf(line, sizeof line,
                      "  network and waiting            %7.2f ms/token (of %.2f ms/token; predicted %.2f)\n",
                      r.token_ms - compute, r.token_ms, predicted);
        breakdown_text += line;
      }
      if (a->json) {
        nlohmann::json row = {{"model", name}, {"test", r.test}, {"n_depth", a->bench.n_depth}, {"threads", a->model.threads},
                              {"backend", backend}, {"device", device_text}, {"gpu_layers", gpu_layers},
                              {"flash_attn", a->model.flash_attn}, {"type_k", a->model.cache_type_k},
                              {"type_v", a->model.cache_type_v}, {"tokens_per_s", r.mean},
                              {"stddev", r.stddev}, {"samples", r.tokens_per_s}};
        if (!breakdown.is_null()) row["per_token"] = breakdown;
        if (drafter && r.test.rfind("tg", 0) == 0) {
          row["speculation"] = {{"drafter", drafter->name()},
                                {"rounds", r.speculation.rounds},
                                {"guesses", r.speculation.guesses},
                                {"accepted", r.speculation.accepted},
                                {"acceptance_rate", r.speculation.acceptance_rate()},
                                {"tokens_per_round", r.speculation.tokens_per_round()},
                                {"draft_ms", 1e3 * r.speculation.draft_seconds},
                                {"forward_ms", 1e3 * r.speculation.forward_seconds}};
        }
        if (r.test.rfind("tg", 0) == 0) {
          row["weight_bytes_read_per_token"] = read;
          if (a->roofline) {
            row["read_bandwidth_gbps"] = gbps;
            row["roofline_tokens_per_s"] = roof;
            row["fraction_of_roofline"] = r.mean / roof;
          }
        }
        out.push_back(std::move(row));
      } else {
        char size[32];
        std::snprintf(size, sizeof size, "%.2f GiB", m->weight_bytes() / 1073741824.0);
        std::printf("| %-28s | %10s | %7s | %7d | %4lld | %*s | %6.2f ± %4.2f |\n", name.c_str(), size, backend.c_str(),
                    a->model.threads, static_cast<long long>(gpu_layers), test_width, r.test.c_str(), r.mean, r.stddev);
      }
    }
    if (small) {
      if (a->json) {
        out.push_back({{"model", name}, {"test", "small_batch"}, {"threads", a->model.threads},
                       {"tokens", small->n}, {"position", small->at}, {"batch_ms", small->batch_ms},
                       {"step_ms", small->step_ms}, {"ratio", small->batch_ms / small->step_ms}});
      } else {
        std::snprintf(text, sizeof text,
                      "\nsmall batch at position %lld: %lld tokens %.2f ms, 1 token %.2f ms, ratio %.2f (medians)",
                      static_cast<long long>(small->at), static_cast<long long>(small->n), small->batch_ms,
                      small->step_ms, small->batch_ms / small->step_ms);
        summary += text;
      }
    }
    if (a->profile && a->json) {
      nlohmann::json shaders = nlohmann::json::array();
      for (const gpu::Device::ProfileEntry& e : profile) {
        shaders.push_back({{"name", e.name},
                           {"calls_per_token", static_cast<double>(e.calls) / profiled_steps},
                           {"ms_per_token", e.ms / profiled_steps}});
      }
      out.push_back({{"model", name}, {"test", "profile"}, {"device", device_text}, {"steps", profiled_steps},
                     {"token_ms", profile_token_ms}, {"gpu_ms", profile_gpu_ms}, {"shaders", shaders}});
    } else if (a->profile) {
      std::snprintf(text, sizeof text,
                    "\ndecode step on %s, %.0f steps timed by Vulkan timestamps: the GPU busy %.2f ms of %.2f ms "
                    "per token (the rest: the host)\n  %-20s %10s %10s %7s",
                    device->info().name.c_str(), profiled_steps, profile_gpu_ms,
                    profile_token_ms, "shader", "calls/tok", "ms/tok", "share");
      summary += text;
      for (const gpu::Device::ProfileEntry& e : profile) {
        std::snprintf(text, sizeof text, "\n  %-20s %10.1f %10.3f %6.1f%%", e.name.c_str(),
                      static_cast<double>(e.calls) / profiled_steps, e.ms / profiled_steps,
                      profile_gpu_ms > 0 ? 100 * e.ms / profiled_steps / profile_gpu_ms : 0.0);
        summary += text;
      }
    }
    if (a->json) {
      std::puts(out.dump(2).c_str());
    } else {
      for (const engine::BenchResult& r : *results) {
        if (drafter && r.test.rfind("tg", 0) == 0) summary += "\n" + r.test + ": " + r.speculation.ToString(drafter->name());
      }
      for (const engine::BenchResult& r : *results) {
        if (!a->roofline || r.test.rfind("tg", 0) != 0) continue;
        std::snprintf(text, sizeof text, "; %s at %.2f t/s is %.0f %% of it", r.test.c_str(), r.mean, 100 * r.mean / roof);
        summary += text;
      }
      std::printf("\n%s\n", summary.c_str());
      if (!breakdown_text.empty()) std::printf("\nper generated token, by stage:\n%s", breakdown_text.c_str());
    }
  });
}

}  // namespace tandem::apps
