// OpenExecutor: the one place an exec::Executor is built. With no workers: the whole model on
// this machine (a LocalExecutor), its weights first copied into memory on huge pages unless
// use_mmap, with progress for copies of 1 GiB or more. With workers: the main node of a pipeline
// (a Coordinator: connect, plan, load, link; see coordinator.h).
//
// Thread safety: a function; `model` must not be in use elsewhere while it runs.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "exec/executor.h"
#include "pipeline/coordinator.h"

namespace tandem::pipeline {

// `model` is the mapping of the file at `model_path`; it must outlive the executor.
Result<std::unique_ptr<exec::Executor>> OpenExecutor(model::Model& model, const std::string& model_path,
                                                     const ExecutorOptions& options);

}  // namespace tandem::pipeline
