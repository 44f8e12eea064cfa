// Subcommands of the `tandem` binary. Each Register* adds one CLI11 subcommand whose callback
// runs the command and stores its exit status in *exit_code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"

namespace tandem::apps {

void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterMakeModel(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterRun(CLI::App& app, int* exit_code);
void RegisterLogits(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterChat(CLI::App& app, int* exit_code);
void RegisterServe(CLI::App& app, int* exit_code);
void RegisterWorker(CLI::App& app, int* exit_code);
void RegisterProbe(CLI::App& app, int* exit_code);
void RegisterKeygen(CLI::App& app, int* exit_code);

// Prints "tandem: error: <message>" as one line on stderr and returns 1.
int ReportError(const std::string& message);

// The whole content of a file (a prompt, a text to tokenize); IOError naming the file.
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace tandem::apps
