// sys.h on macOS: sysctl, Mach host statistics, QoS classes, fcntl close-on-exec, SO_NOSIGPIPE.
// Compile-checked for aarch64-macos in CI (scripts/macos-compile-check.sh); not yet run on a Mac.
#include <fcntl.h>
#include <mach/mach.h>
#include <pthread.h>
#include <pthread/qos.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/sysctl.h>
#include <unistd.h>

#include <cerrno>

#include "base/sys.h"

namespace tandem::sys {
namespace {

// An integer sysctl by name, or `fallback` when the name does not exist on this machine.
int64_t SysctlInt(const char* name, int64_t fallback) {
  // The kernel answers in the width of the value: 4 bytes for most hw.* counts, 8 for hw.memsize.
  union {
    int32_t i32;
    int64_t i64;
  } v{};
  size_t n = sizeof v;
  if (::sysctlbyname(name, &v, &n, nullptr, 0) != 0) return fallback;
  if (n == sizeof(int32_t)) return v.i32;
  if (n == sizeof(int64_t)) return v.i64;
  return fallback;
}

// Close-on-exec and no SIGPIPE for a new descriptor; closes it and returns -1 when refused.
int Prepare(int fd, bool nonblocking) {
  if (fd < 0) return fd;
  int one = 1;
  bool ok = ::fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 &&
            ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one) == 0;
  if (ok && nonblocking) {
    const int flags = ::fcntl(fd, F_GETFL);
    ok = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  }
  if (!ok) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

uint64_t PeakResidentBytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_maxrss);
}

MemoryInfo Memory() {
  MemoryInfo m;
  m.total = static_cast<uint64_t>(SysctlInt("hw.memsize", 0));
  vm_statistics64_data_t vm{};
  mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
  if (::host_statistics64(::mach_host_self(), HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm),
                          &count) == KERN_SUCCESS) {
    // Free pages, plus those the system drops without writing anything out: inactive (clean
    // file cache, mostly) and purgeable. Wired and compressed memory is not available.
    const uint64_t pages = static_cast<uint64_t>(vm.free_count) + vm.inactive_count + vm.purgeable_count;
    m.available = pages * PageSize();
    if (m.total > 0 && m.available > m.total) m.available = m.total;
  }
  return m;
}

size_t PageSize() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 16384;
}

void AdviseHugePages(void*, size_t) {}  // macOS has no such advice for anonymous memory

int DefaultThreadCount() {
  // Performance cores where the machine has several kinds (Apple Silicon), else physical cores.
  int64_t n = SysctlInt("hw.perflevel0.physicalcpu", 0);
  if (n <= 0) n = SysctlInt("hw.physicalcpu", 0);
  if (n <= 0) n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

bool RequestAmxTiles() { return false; }

bool ArmHasDotProd() {
  // Every Apple Silicon core has it; older macOS releases name it armv8_2_dotprod.
  return SysctlInt("hw.optional.arm.FEAT_DotProd", 0) == 1 ||
         SysctlInt("hw.optional.armv8_2_dotprod", 0) == 1;
}

bool PlacesThreadsByCpu() { return false; }
std::vector<int> CallingThreadCpus() { return {}; }
int CurrentCpu() { return -1; }
bool SetThreadCpus(std::thread&, const std::vector<int>&) { return false; }
bool SetCallingThreadCpus(const std::vector<int>&) { return false; }

void PreferPerformanceCores() { ::pthread_set_qos_class_self_np(QOS_CLASS_USER_INTERACTIVE, 0); }

int OpenSocket(int family, int type, int protocol, bool nonblocking) {
  return Prepare(::socket(family, type, protocol), nonblocking);
}

int AcceptSocket(int listen_fd) {
  // Between accept and fcntl another thread's exec could inherit the descriptor; tandem does not
  // exec while serving, so the window is harmless here.
  const int fd = ::accept(listen_fd, nullptr, nullptr);
  if (fd < 0) return fd;
  // An accepted socket inherits O_NONBLOCK from the listener on BSD systems: clear it.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return Prepare(fd, false);
}

ssize_t SendNoSignal(int fd, const void* data, size_t n) { return ::send(fd, data, n, 0); }

bool OpenWakeFd(WakeFd* w) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  for (int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      const int saved = errno;
      ::close(fds[0]);
      ::close(fds[1]);
      errno = saved;
      return false;
    }
  }
  w->read_fd = fds[0];
  w->write_fd = fds[1];
  return true;
}

void CloseWakeFd(WakeFd* w) {
  if (w->read_fd >= 0) ::close(w->read_fd);
  if (w->write_fd >= 0 && w->write_fd != w->read_fd) ::close(w->write_fd);
  w->read_fd = w->write_fd = -1;
}

void UsePreciseTimers() {}

std::vector<std::string> VulkanLoaderNames() { return {"libvulkan.1.dylib", "libMoltenVK.dylib"}; }

std::string SystemName() { return "macOS"; }

}  // namespace tandem::sys
