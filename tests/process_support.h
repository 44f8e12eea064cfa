// Background processes for multi-process tests: spawn the real `tandem` binary with its output
// in files, wait with a deadline, kill. Every child is killed when its Process is destroyed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cli_support.h"

namespace tandem::testing {

class Process {
 public:
  explicit Process(const std::vector<std::string>& args) {
    static int serial = 0;
    const std::string base = ::testing::TempDir() + "tandem_proc." + std::to_string(getpid()) + "." +
                             std::to_string(serial++);
    out_ = base + ".out";
    err_ = base + ".err";
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen(out_.c_str(), "w", stdout) || !freopen(err_.c_str(), "w", stderr)) _exit(127);
      if (!freopen("/dev/null", "r", stdin)) _exit(127);
      std::vector<char*> argv;
      std::string bin = TANDEM_BIN;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Process() {
    if (running()) Kill(SIGKILL);
    std::remove(out_.c_str());
    std::remove(err_.c_str());
  }

  std::string out() const { return Slurp(out_); }
  std::string err() const { return Slurp(err_); }
  bool running() {
    if (done_) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      done_ = true;
      status_ = st;
    }
    return !done_;
  }
  void Kill(int sig) {
    kill(pid_, sig);
    Wait(10.0);
  }
  // Waits up to `seconds`; true when the process has exited.
  bool Wait(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  bool exited_ok() const { return done_ && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }
  bool killed_by_signal() const { return done_ && WIFSIGNALED(status_); }
  int exit_code() const { return done_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  // Waits until stdout contains `text` (or the process exits / the deadline passes).
  bool WaitForOutput(const std::string& text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (out().find(text) != std::string::npos) return true;
      if (!running()) return out().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
  std::string out_, err_;
};

// Starts `tandem worker --port 0 ...` and returns it with its port once it listens.
inline std::unique_ptr<Process> StartWorker(std::vector<std::string> extra, int* port) {
  // Tests run every node on one machine: workers may open the main node's own path.
  std::vector<std::string> args = {"worker", "--port", "0", "-t", "1", "--allow-main-path"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Process>(args);
  *port = 0;
  if (!p->WaitForOutput("listening on", 30)) return p;
  const std::string o = p->out();
  const size_t at = o.find("127.0.0.1:");
  if (at != std::string::npos) *port = std::stoi(o.substr(at + 10));
  return p;
}

}  // namespace tandem::testing
