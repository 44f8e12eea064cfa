// tandem-linkemu: a userspace link emulator between two TCP endpoints (see README.md).
//
//   tandem-linkemu --listen 127.0.0.1:PORT --target 127.0.0.1:PORT
//                  [--delay-ms D] [--jitter-ms J] [--bandwidth-mbps B]
//
// Prints "listening on HOST:PORT" once ready, then reads one command per line on stdin:
//   delay D | jitter J | bandwidth B | drop | stall | resume | stats | quit
// and answers each with one line, "ok" (stats: "ok bytes=N connections=M") or "error: ...".
// Exits cleanly on `quit`, end of stdin, SIGTERM or SIGINT.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "linkemu/link_emulator.h"

namespace tandem::linkemu {
namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

// "HOST:PORT" or "[V6ADDR]:PORT".
Result<HostPort> ParseHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 >= s.size()) {
    return Status::InvalidArgument("expected HOST:PORT, got '" + s + "'");
  }
  HostPort hp;
  hp.host = s.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  const std::string port = s.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (errno != 0 || end == port.c_str() || *end != '\0' || v < 0 || v > 65535) {
    return Status::InvalidArgument("bad port in '" + s + "'");
  }
  hp.port = static_cast<int>(v);
  return hp;
}

Result<double> ParseNumber(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument("expected a number >= 0, got '" + s + "'");
  }
  return v;
}

void Reply(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// Runs one command line; returns false on `quit`.
bool RunCommand(LinkEmulator& emu, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg, extra;
  in >> cmd >> arg >> extra;
  if (cmd.empty()) return true;
  if (!extra.empty()) {
    Reply("error: too many arguments");
    return true;
  }
  if (cmd == "delay" || cmd == "jitter" || cmd == "bandwidth") {
    Result<double> v = ParseNumber(arg);
    if (!v.ok()) {
      Reply("error: " + v.status().message());
      return true;
    }
    LinkConfig cfg = emu.config();
    (cmd == "delay" ? cfg.delay_ms : cmd == "jitter" ? cfg.jitter_ms : cfg.bandwidth_mbps) = *v;
    Status st = emu.SetConfig(cfg);
    Reply(st.ok() ? "ok" : "error: " + st.message());
    return true;
  }
  if (!arg.empty()) {
    Reply("error: '" + cmd + "' takes no argument");
    return true;
  }
  if (cmd == "drop") {
    emu.DropAll();
  } else if (cmd == "stall") {
    emu.Stall(true);
  } else if (cmd == "resume") {
    emu.Stall(false);
  } else if (cmd == "stats") {
    Reply("ok bytes=" + std::to_string(emu.bytes_forwarded()) +
          " connections=" + std::to_string(emu.active_connections()));
    return true;
  } else if (cmd == "quit") {
    Reply("ok");
    return false;
  } else {
    Reply("error: unknown command '" + cmd + "'");
    return true;
  }
  Reply("ok");
  return true;
}

int Run(const std::string& listen, const std::string& target, const LinkConfig& cfg) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "tandem-linkemu: error: %s\n", m.c_str());
    return 1;
  };
  Result<HostPort> l = ParseHostPort(listen);
  if (!l.ok()) return fail(l.status().message());
  Result<HostPort> t = ParseHostPort(target);
  if (!t.ok()) return fail(t.status().message());

  // SIGINT and SIGTERM arrive through a signalfd; blocking them before the emulator starts its
  // threads means none of those threads is chosen to take them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &sigs, nullptr) != 0) return fail("cannot block signals");
  // A shell starts background commands with SIGINT ignored, and an ignored signal never reaches
  // the signalfd: restore the default so `kill -INT` works (blocked, so it cannot kill us).
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  const int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
  if (sfd < 0) return fail(std::string("signalfd: ") + std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill us

  auto emu = LinkEmulator::Start(l->host, l->port, t->host, t->port, cfg);
  if (!emu.ok()) {
    ::close(sfd);
    return fail(emu.status().message());
  }
  const bool v6 = l->host.find(':') != std::string::npos;
  Reply("listening on " + (v6 ? "[" + l->host + "]" : l->host) + ":" +
        std::to_string((*emu)->port()));

  std::string pending;
  char buf[4096];
  bool running = true;
  while (running) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;  // SIGINT / SIGTERM
    if (fds[0].revents == 0) continue;
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of stdin (or an error on it)
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while (running && (nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      running = RunCommand(**emu, line);
    }
  }
  (*emu)->Stop();
  ::close(sfd);
  return 0;
}

}  // namespace
}  // namespace tandem::linkemu

int main(int argc, char** argv) {
  CLI::App app{"tandem-linkemu: forward TCP connections with added delay, jitter and a rate cap"};
  std::string listen, target;
  tandem::linkemu::LinkConfig cfg;
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0 picks a free one)")
      ->required();
  app.add_option("--target", target, "HOST:PORT to forward each connection to")->required();
  app.add_option("--delay-ms", cfg.delay_ms, "one-way delay per direction, milliseconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--jitter-ms", cfg.jitter_ms, "extra uniform random delay [0, J] per chunk")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bandwidth-mbps", cfg.bandwidth_mbps,
                 "rate cap per direction, megabits per second (0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return tandem::linkemu::Run(listen, target, cfg);
}
