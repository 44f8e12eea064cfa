// For tests only: a worker daemon serving on loopback on its own thread until destroyed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "pipeline/worker.h"

namespace tandem::pipeline {

struct TestWorker {
  std::unique_ptr<Worker> w;
  std::thread t;
  // With the main node's file (same machine) unless given a cache folder.
  explicit TestWorker(std::optional<net::Key> key = std::nullopt, std::string cache_dir = "")
      : TestWorker(Options(key, cache_dir)) {}
  // Any options; the port (a free one), threads (1) and log (none) are set here.
  explicit TestWorker(WorkerOptions o) {
    o.port = 0;
    o.threads = 1;
    o.log = [](const std::string&) {};
    Result<std::unique_ptr<Worker>> r = Worker::Start(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    w = std::move(*r);
    t = std::thread([this] { w->Serve(); });
  }
  ~TestWorker() {
    w->Stop();
    t.join();
  }
  std::string addr() const { return "127.0.0.1:" + std::to_string(w->port()); }

 private:
  static WorkerOptions Options(std::optional<net::Key> key, std::string cache_dir) {
    WorkerOptions o;
    o.use_main_path = cache_dir.empty();
    o.cache_dir = std::move(cache_dir);
    o.key = key;
    return o;
  }
};

}  // namespace tandem::pipeline
