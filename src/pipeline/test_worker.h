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
  explicit TestWorker(std::optional<net::Key> key = std::nullopt, std::string cache_dir = "") {
    WorkerOptions o;
    o.cache_dir = cache_dir;
    o.use_main_path = cache_dir.empty();
    o.port = 0;
    o.threads = 1;
    o.key = key;
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
};

}  // namespace tandem::pipeline
