#include "pipeline/executor_factory.h"

#include <cstdio>

#include "base/progress.h"
#include "net/auth.h"
#include "net/socket.h"
#include "pipeline/resuming_executor.h"

namespace tandem::pipeline {
namespace {

// The whole model on this machine: refused when it does not fit in free memory.
Result<std::unique_ptr<exec::Executor>> OpenLocal(model::Model& model, const ExecutorOptions& o, bool check_memory) {
  if (check_memory) {
    const std::vector<NodeInfo> main = {{"main (this machine)", sys::Memory().available}};
    TANDEM_RETURN_IF_ERROR(MakePlan(Footprint(model.file(), model.params(), o.n_ctx, o.context.type_k, o.context.type_v),
                                    main, PlanOptions{}).status());
  }
  if (o.ubatch < 0) return Status::InvalidArgument("--ubatch-size must be positive (or 0: automatic)");
  const int64_t n_layer = model.params().n_layer;
  const int64_t gpu_layers = model::GpuLayerCount(model, o.n_ctx, 0, n_layer, o.context);
  if (!o.use_mmap) {
    Progress progress("tandem: weights copied into memory", [&](const std::string& line) { LogLine(o, line); },
                      /*min_total=*/uint64_t{1} << 30);
    // The GPU's layers and head go to the device from the map, never to host memory.
    TANDEM_RETURN_IF_ERROR(model.CopyIntoMemory(0, n_layer - gpu_layers, gpu_layers == 0, [&](uint64_t done, uint64_t total) {
      progress.Update(done, total);
      return true;
    }));
  }
  auto local = std::make_unique<exec::LocalExecutor>(model, o.n_ctx, o.threads, o.ubatch, o.context);
  TANDEM_RETURN_IF_ERROR(local->context().status());
  if (gpu_layers > 0) {
    const gpu::DeviceInfo& d = o.context.device->info();
    LogLine(o, "tandem: " + std::to_string(gpu_layers) + " of " + std::to_string(n_layer) + " layers and the head on " + d.name + " (" + d.description + ")");
  }
  return std::unique_ptr<exec::Executor>(std::move(local));
}

// Plans over the workers; a pipeline if the plan keeps any, else this machine alone.
Result<std::unique_ptr<exec::Executor>> OpenPlanned(model::Model& model, const std::string& model_path,
                                                    const ExecutorOptions& o) {
  const auto log = [&](const std::string& l) { LogLine(o, l); };
  TANDEM_ASSIGN_OR_RETURN(PlannedPipeline planned, PlanPipeline(model, o, log));
  if (planned.plan.stages.size() < 2) {
    log("tandem: this machine alone is predicted faster than with the workers (--plan memory uses them)");
    return OpenLocal(model, o, /*check_memory=*/false);
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> c, Coordinator::Open(model, model_path, o, std::move(planned)));
  return std::unique_ptr<exec::Executor>(std::move(c));
}

}  // namespace

Result<std::unique_ptr<exec::Executor>> OpenExecutor(model::Model& model, const std::string& model_path,
                                                     const ExecutorOptions& o) {
  TANDEM_RETURN_IF_ERROR(model::CheckContextOptions(model.params(), o.context));
  if (o.workers.empty()) return OpenLocal(model, o, /*check_memory=*/false);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<exec::Executor> first, OpenPlanned(model, model_path, o));
  if (!o.resume || first->stages().size() < 2) return first;
  ResumeOptions ro;
  ro.workers = o.workers;
  ro.standby = o.standby;
  ro.log = o.log;
  // `model` and `model_path` outlive the executor (the caller's guarantee); the options are kept.
  PipelineOpener open = [&model, model_path, o](const std::vector<std::string>& workers,
                                                bool quiet) -> Result<std::unique_ptr<exec::Executor>> {
    ExecutorOptions w = o;
    w.workers = workers;
    if (quiet) w.log = [](const std::string&) {};
    if (workers.empty()) return OpenLocal(model, w, /*check_memory=*/true);
    return OpenPlanned(model, model_path, w);
  };
  WorkerProbe probe = [o](const std::string& worker) -> Status {
    std::string host;
    uint16_t port = 0;
    TANDEM_RETURN_IF_ERROR(net::ParseHostPort(worker, net::kDefaultPort, &host, &port));
    TANDEM_ASSIGN_OR_RETURN(net::Socket s, net::Socket::Connect(host, port, std::min(o.connect_timeout_ms, 1000)));
    TANDEM_ASSIGN_OR_RETURN(net::WorkerInfo info, net::ClientHandshake(s, net::Role::kProbe, o.key, 1000));
    if (info.busy) return Status::Unavailable("busy serving another session");
    return Status::Ok();
  };
  return std::unique_ptr<exec::Executor>(
      std::make_unique<ResumingExecutor>(std::move(first), std::move(ro), std::move(open), std::move(probe)));
}

}  // namespace tandem::pipeline
