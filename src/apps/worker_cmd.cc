// `tandem worker`: the daemon each extra machine runs; serves one model session at a time.
#include <csignal>
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/model_flags.h"
#include "pipeline/worker.h"
#include "net/auth.h"

namespace tandem::apps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

}  // namespace

void RegisterWorker(CLI::App& app, int* exit_code) {
  struct Args {
    pipeline::WorkerOptions o;
    uint64_t mem_mb = 0;
    std::string key_file;
    std::string device;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "Serve layers of a model to a main node (run this on each extra machine)");
  cmd->add_option("--host", a->o.host, "Address to listen on (a non-loopback address needs a key)")
      ->capture_default_str();
  cmd->add_option("-p,--port", a->o.port, "Port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.threads, "Threads for computing")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--mem", a->mem_mb, "Memory this worker may use, MiB (default: what is available)");
  cmd->add_option("-m,--model", a->o.model_path, "Local copy of the model file");
  cmd->add_option("--models-dir", a->o.models_dir, "Folder searched for the model by content");
  cmd->add_option("--cache-dir", a->o.cache_dir,
                  "Keep weights received from the main node here (content-verified), so the next "
                  "start moves none");
  cmd->add_flag("--allow-main-path", a->o.use_main_path,
                "Also open the path the main node names for its copy (same-machine tests and benchmarks); "
                "without it a main node can only use the models given by -m, --models-dir and --cache-dir");
  cmd->add_flag("--no-main-path{false}", a->o.use_main_path, "The default: see --allow-main-path");
  cmd->add_option("--auth-key-file", a->key_file, "Pre-shared key file (the same on every node)");
  cmd->add_flag("--insecure", a->o.insecure, "Allow a non-loopback address without a key");
  cmd->add_option("--max-connections", a->o.max_connections,
                  "Connections served at once (handshakes included); more are closed unread")
      ->capture_default_str()->check(CLI::Range(2, 4096));
  AddDeviceFlags(cmd, &a->device, &a->o.gpu_layers);
  cmd->callback([a, exit_code] {
    Result<std::shared_ptr<gpu::Device>> device = OpenDevice(a->device);
    if (!device.ok()) {
      *exit_code = ReportError(device.status().ToString());
      return;
    }
    a->o.device = *device;
    if (!a->key_file.empty()) {
      Result<net::Key> k = net::LoadKeyFile(a->key_file);
      if (!k.ok()) {
        *exit_code = ReportError(k.status().ToString());
        return;
      }
      a->o.key = *k;
    }
    a->o.mem_bytes = a->mem_mb << 20;
    Result<std::unique_ptr<pipeline::Worker>> w = pipeline::Worker::Start(a->o);
    if (!w.ok()) {
      *exit_code = ReportError(w.status().ToString());
      return;
    }
    const net::WorkerInfo& info = (*w)->info();
    std::printf("tandem worker: listening on %s:%u (protocol %u, %s, %u threads, %.1f GiB free, "
                "Q4_K matvec %.1f GB/s%s%s)\n",
                a->o.host.c_str(), (*w)->port(), net::kProtocolVersion, info.cpu_features.c_str(),
                info.threads, info.free_memory / 1073741824.0, info.matvec_gbps,
                a->o.key ? ", key required" : ", no key",
                a->o.device ? (", GPU " + a->o.device->info().name + " " + a->o.device->info().description).c_str() : "");
    std::fflush(stdout);
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGPIPE, SIG_IGN);
    (*w)->Serve(&g_stop);
    std::fprintf(stderr, "tandem worker: stopped\n");
  });
}

}  // namespace tandem::apps
