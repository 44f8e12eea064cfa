#include <cstdio>
#include <string>

#include <unistd.h>

#include "apps/commands.h"
#include "synth/make_model.h"

namespace tandem::apps {

void RegisterMakeModel(CLI::App& app, int* exit_code) {
  struct Args {
    std::string shape = "tiny";
    std::string type = "f32";
    std::string out;
    uint64_t seed = 42;
    uint32_t n_layer = 0;
    uint32_t n_ctx = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a random-weight model of a known shape (benchmarks without downloads)");
  cmd->add_option("--shape", args->shape, "Model shape: " + synth::ShapeNames())
      ->capture_default_str();
  cmd->add_option("--type", args->type,
                  "File type: " + synth::FileTypeNames() +
                      " (quantized types choose per-tensor types as llama.cpp does)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->out, "Output GGUF file")->required();
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_option("--n-layer", args->n_layer,
                  "Keep only this many layers of the shape (a shallower model of a big shape, for benchmarks)")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--context-length", args->n_ctx,
                  "Trained context length written to the file (default: the shape's); the engine "
                  "caps its context at it")
      ->check(CLI::Range(1u, 1u << 24));
  cmd->callback([args, exit_code] {
    std::optional<synth::ModelShape> shape = synth::FindShape(args->shape);
    if (!shape) {
      *exit_code = ReportError("unknown shape '" + args->shape + "' (known: " +
                               synth::ShapeNames() + ")");
      return;
    }
    std::optional<synth::FileType> type = synth::ParseFileType(args->type);
    if (!type) {
      *exit_code = ReportError("unknown or unsupported file type '" + args->type +
                               "' (supported: " + synth::FileTypeNames() + ")");
      return;
    }
    if (args->n_layer > 0) shape->n_layer = args->n_layer;
    if (args->n_ctx > 0) shape->n_ctx = args->n_ctx;
    synth::MakeModelOptions o{*shape, *type, args->seed};
    const bool tty = isatty(fileno(stderr));
    Status st = synth::MakeModel(o, args->out, [tty](size_t done, size_t total) {
      if (tty) std::fprintf(stderr, "\rwriting tensors: %zu/%zu", done, total);
      if (tty && done == total) std::fprintf(stderr, "\n");
    });
    if (!st.ok()) {
      *exit_code = ReportError(st.ToString());
      return;
    }
    std::fprintf(stderr, "wrote %s (%s, %s)\n", args->out.c_str(), std::string(shape->name).c_str(),
                 args->type.c_str());
  });
}

}  // namespace tandem::apps
