// sys.h on Linux: /proc and sysfs, getauxval, CPU affinity, SOCK_CLOEXEC, accept4, MSG_NOSIGNAL,
// transparent huge pages.
#include <pthread.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <utility>

#include "base/sys.h"

namespace tandem::sys {
namespace {

std::vector<int> CpusOf(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool MaskOf(const std::vector<int>& cpus, cpu_set_t* set) {
  CPU_ZERO(set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, set);
  }
  return CPU_COUNT(set) > 0;
}

// One number from a sysfs file, or -1.
long ReadNumber(const std::string& path) {
  std::ifstream in(path);
  long v = -1;
  if (!(in >> v)) return -1;
  return v;
}

}  // namespace

uint64_t PeakResidentBytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_maxrss)* 1024;
}

MemoryInfo Memory() {
  MemoryInfo m;
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") m.total = kb * 1024;
    if (key == "MemAvailable:") m.available = kb * 1024;
  }
  return m;
}

size_t PageSize() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}

void AdviseHugePages(void* p, size_t n) {
  ::madvise(p, n, MADV_HUGEPAGE);  // advisory: without THP the pages stay 4 KiB
}

int DefaultThreadCount() {
  const std::vector<int> cpus = CallingThreadCpus();
  if (cpus.empty()) {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? static_cast<int>(hw) : 1;
  }
  // Hyper-threads of one core share its execution units: count each core once.
  std::set<std::pair<long, long>> cores;
  for (int c : cpus) {
    const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const long package = ReadNumber(topo + "physical_package_id");
    const long core = ReadNumber(topo + "core_id");
    if (core < 0) return static_cast<int>(cpus.size());  // no topology: count every CPU
    cores.insert({package, core});
  }
  return static_cast<int>(cores.size());
}

bool ArmHasDotProd() {
  constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP in the arm64 AT_HWCAP word
  return (::getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
}

bool RequestAmxTiles() {
#ifdef SYS_arch_prctl  // the x86-64 system call; other Linux targets have no such state to ask for
  constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM (Linux 5.16)
  constexpr long kXfeatureXtiledata = 18;
  return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool PlacesThreadsByCpu() { return true; }

std::vector<int> CallingThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::pthread_getaffinity_np(::pthread_self(), sizeof set, &set) != 0) return {};
  return CpusOf(set);
}

int CurrentCpu() { return ::sched_getcpu(); }

bool SetThreadCpus(std::thread& t, const std::vector<int>& cpus) {
  cpu_set_t set;
  if (!MaskOf(cpus, &set)) return false;
  return ::pthread_setaffinity_np(t.native_handle(), sizeof set, &set) == 0;
}

bool SetCallingThreadCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  if (!MaskOf(cpus, &set)) return false;
  return ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0;
}

void PreferPerformanceCores() {}

int OpenSocket(int family, int type, int protocol, bool nonblocking) {
  return ::socket(family, type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), protocol);
}

int AcceptSocket(int listen_fd) { return ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC); }

ssize_t SendNoSignal(int fd, const void* data, size_t n) { return ::send(fd, data, n, MSG_NOSIGNAL); }

bool OpenWakeFd(WakeFd* w) {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  w->read_fd = w->write_fd = fd;
  return fd >= 0;
}

void CloseWakeFd(WakeFd* w) {
  if (w->read_fd >= 0) ::close(w->read_fd);
  w->read_fd = w->write_fd = -1;
}

void UsePreciseTimers() { ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); }

std::vector<std::string> VulkanLoaderNames() { return {"libvulkan.so.1", "libvulkan.so"}; }

std::string SystemName() { return "Linux"; }

}  // namespace tandem::sys
