// tandem: run one large language model split across several machines.
// This file wires subcommands together; each lives in its own *_cmd.cc.
#include <cstdio>

#include "apps/commands.h"
#include "apps/model_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem: one large language model across several machines"};
  app.set_version_flag("--version", "tandem 0.1.0");
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::apps::RegisterInspect(app, &exit_code);
  tandem::apps::RegisterMakeModel(app, &exit_code);
  tandem::apps::RegisterTokenize(app, &exit_code);
  tandem::apps::RegisterRun(app, &exit_code);
  tandem::apps::RegisterLogits(app, &exit_code);
  tandem::apps::RegisterBench(app, &exit_code);
  tandem::apps::RegisterChat(app, &exit_code);
  tandem::apps::RegisterServe(app, &exit_code);
  tandem::apps::RegisterWorker(app, &exit_code);
  tandem::apps::RegisterProbe(app, &exit_code);
  tandem::apps::RegisterKeygen(app, &exit_code);
  std::vector<const char*> args(argv, argv + argc);
  // --list-devices anywhere (before "--"): llama.cpp's flag, printed without needing a model.
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    if (std::string_view(argv[i]) == "--list-devices") return tandem::apps::ListDevices();
  }
  tandem::apps::RewriteShortFlags(args);  // -fa, -ctk, -ctv, -ub, -ts, -np
  try {
    app.parse(argc, args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
