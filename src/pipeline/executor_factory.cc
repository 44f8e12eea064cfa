#include "pipeline/executor_factory.h"

#include <cstdio>

#include "base/progress.h"

namespace tandem::pipeline {

Result<std::unique_ptr<exec::Executor>> OpenExecutor(model::Model& model, const std::string& model_path,
                                                     const ExecutorOptions& o) {
  TANDEM_RETURN_IF_ERROR(model::CheckContextOptions(model.params(), o.context));
  if (!o.workers.empty()) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> c, Coordinator::Open(model, model_path, o));
    return std::unique_ptr<exec::Executor>(std::move(c));
  }
  if (o.ubatch < 0) return Status::InvalidArgument("--ubatch-size must be positive (or 0: automatic)");
  if (!o.use_mmap) {
    Progress progress("tandem: weights copied into memory", [&](const std::string& line) {
      if (o.log) {
        o.log(line);
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    }, /*min_total=*/uint64_t{1} << 30);
    TANDEM_RETURN_IF_ERROR(model.CopyIntoMemory(0, model.params().n_layer, true, [&](uint64_t done, uint64_t total) {
      progress.Update(done, total);
      return true;
    }));
  }
  return std::unique_ptr<exec::Executor>(
      std::make_unique<exec::LocalExecutor>(model, o.n_ctx, o.threads, o.ubatch, o.context));
}

}  // namespace tandem::pipeline
