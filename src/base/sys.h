// sys: the facts and calls that differ between operating systems, behind one header.
//
// Everything that only one system offers (Linux: /proc, sysfs, getauxval, CPU affinity, accept4,
// SOCK_CLOEXEC, MSG_NOSIGNAL, MADV_HUGEPAGE; macOS: sysctl, Mach host statistics, QoS classes,
// SO_NOSIGPIPE) lives in sys_linux.cc or sys_darwin.cc and nowhere else; tests/os_boundary_test.sh
// fails the build's tests when such a call or header appears in any other file. Plain POSIX (mmap,
// poll, fcntl, pthreads) may be used anywhere.
//
// Thread safety: every function may be called from any thread. None of them keeps state except
// where a comment says it caches.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace tandem::sys {

// --- Memory ---

struct MemoryInfo {
  uint64_t total = 0;      // physical memory of the machine, bytes
  uint64_t available = 0;  // what a new allocation can take without pushing others to swap
};

// Linux: MemTotal and MemAvailable from /proc/meminfo. macOS: hw.memsize, and free + inactive +
// purgeable pages from the Mach host statistics (on Apple Silicon the GPU shares this memory, so
// it is also what a stage can use there). Zeros when the system does not say.
MemoryInfo Memory();

// The most memory this process has had resident at once, in bytes (getrusage's ru_maxrss, which
// Linux gives in KiB and macOS in bytes).
uint64_t PeakResidentBytes();

// The size of a virtual-memory page (4 KiB on x86-64 Linux, 16 KiB on Apple Silicon).
size_t PageSize();

// Advises the kernel to back [p, p + n) with huge pages (Linux transparent huge pages). Advisory:
// does nothing where the system has no such advice (macOS picks its own page sizes).
void AdviseHugePages(void* p, size_t n);

// --- CPU ---

// The default number of compute threads: the physical cores this process may run on (Linux:
// sched_getaffinity and the sysfs core topology, so hyper-threads are not counted twice); on
// Apple Silicon the performance cores (hw.perflevel0.physicalcpu), since a stage that also ran
// on efficiency cores would go at their pace. At least 1.
int DefaultThreadCount();

// Whether an ARM64 CPU has the dot-product instructions (SDOT/UDOT, FEAT_DotProd). Linux:
// HWCAP_ASIMDDP from getauxval; macOS: hw.optional.arm.FEAT_DotProd. Meaningful only when the
// program runs on ARM64; the kernels ask it only there.
bool ArmHasDotProd();

// Asks the OS to let this process use Intel AMX tile data (Linux: arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA; the permission covers every thread). True when granted;
// false elsewhere (macOS) or when refused. Ask only where the CPU has AMX; the kernels do.
bool RequestAmxTiles();

// --- Thread placement ---

// True where threads can be tied to CPUs by number (Linux). macOS places threads by quality of
// service instead, and then the CPU calls below answer empty / -1 / false.
bool PlacesThreadsByCpu();

// The CPUs the calling thread may run on, ascending; empty where unknown.
std::vector<int> CallingThreadCpus();

// The CPU the calling thread is running on now, or -1 where unknown.
int CurrentCpu();

// Restricts a thread (or the calling one) to `cpus`. False when refused or not supported.
bool SetThreadCpus(std::thread& t, const std::vector<int>& cpus);
bool SetCallingThreadCpus(const std::vector<int>& cpus);

// Called by a compute thread when it starts: on macOS it asks for the user-interactive QoS class,
// which keeps it on performance cores; on Linux nothing (placement there is by CPU, above).
void PreferPerformanceCores();

// --- Sockets ---
// Descriptors returned here are close-on-exec, and writing to them never raises SIGPIPE (a closed
// peer gives EPIPE instead): Linux passes MSG_NOSIGNAL on each send, macOS sets SO_NOSIGPIPE on
// the socket.

// socket(2) for `family`/`type`/`protocol`, non-blocking when asked. -1 with errno on failure.
int OpenSocket(int family, int type, int protocol, bool nonblocking);

// accept(2) on a listening socket; the new descriptor is blocking. -1 with errno on failure.
int AcceptSocket(int listen_fd);

// send(2) without SIGPIPE. Returns what send returns.
ssize_t SendNoSignal(int fd, const void* data, size_t n);

// A level-triggered "something happened" flag that poll(2) can wait on: after a write of 8 bytes
// to write_fd, read_fd polls readable until drained. Linux: one eventfd (both fields the same
// descriptor); elsewhere a pipe. Both ends close-on-exec and non-blocking.
struct WakeFd {
  int read_fd = -1;
  int write_fd = -1;
};
bool OpenWakeFd(WakeFd* w);   // false with errno when the system refuses
void CloseWakeFd(WakeFd* w);  // closes what is open; safe to call twice

// Sleeping threads of this process wake as close to their deadline as the system allows (Linux:
// a timer slack of 1 ns instead of 50 us; elsewhere nothing). For link emulation and timing tests.
void UsePreciseTimers();

// The file names of the Vulkan loader library on this system, most likely first (Linux:
// libvulkan.so.1; macOS: the SDK's libvulkan.1.dylib, then MoltenVK's own).
std::vector<std::string> VulkanLoaderNames();

// The name of this operating system, for messages ("Linux", "macOS").
std::string SystemName();

}  // namespace tandem::sys
