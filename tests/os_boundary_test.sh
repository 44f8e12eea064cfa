#!/usr/bin/env bash
# Operating-system code lives only in src/base/sys_linux.cc and src/base/sys_darwin.cc, behind
# src/base/sys.h (so a port to another system is one new file, and the Linux and macOS builds
# cannot drift apart unnoticed). Fails, listing the lines, when any other C++ file under src/,
# tests/ or bench/ uses a Linux-only or macOS-only header or call, or tests an OS macro. Text
# after `//` is not code and is not checked. Plain POSIX (mmap, poll, fcntl, pthreads) is allowed.
# Usage: os_boundary_test.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: os_boundary_test.sh SOURCE_ROOT}
source "$(dirname "$0")/boundary_lib.sh"
require_tree "$root" src src/base tests bench
linux='sys/auxv\.h|asm/hwcap\.h|sys/eventfd\.h|sys/epoll\.h|sys/prctl\.h|sys/sysinfo\.h|<linux/|sched_getcpu|sched_[gs]etaffinity|pthread_[gs]etaffinity_np|cpu_set_t|\bCPU_(SET|ZERO|ISSET|COUNT|SETSIZE|EQUAL)\b|getauxval|/proc/|/sys/(devices|fs|kernel)|MADV_HUGEPAGE|\baccept4\b|SOCK_CLOEXEC|SOCK_NONBLOCK|MSG_NOSIGNAL|\bepoll_[a-z]+|\beventfd\b|\bprctl\b|\bPR_SET_|\bsysinfo\b|\bmemfd_create\b|\bMAP_POPULATE\b'
darwin='sys/sysctl\.h|\bsysctl(byname)?\b|<mach/|\bmach_[a-z_]+|host_statistics|SO_NOSIGPIPE|pthread_set_qos|QOS_CLASS_|pthread/qos\.h|\bkqueue\b|\bkevent\b'
macros='__linux__|__APPLE__|__MACH__|\b__gnu_linux__\b'
pattern="$linux|$darwin|$macros"
allowed="^($root/src/base/sys_linux\.cc|$root/src/base/sys_darwin\.cc|$root/src/base/sys\.h):"
found=$(grep -rnE --include='*.h' --include='*.cc' --include='*.cpp' "$pattern" \
          "$root/src" "$root/tests" "$root/bench" | grep -vE "$allowed" |
        while IFS= read -r hit; do
          # file:line:text -> keep only hits in the code before any // comment
          text=${hit#*:*:}
          code=${text%%//*}
          if grep -qE "$pattern" <<<"$code"; then echo "$hit"; fi
        done || true)
if [[ -n "$found" ]]; then
  echo "operating-system code outside src/base/sys_*.cc:"
  echo "$found"
  exit 1
fi
count=$(find "$root/src" "$root/tests" "$root/bench" \( -name '*.h' -o -name '*.cc' -o -name '*.cpp' \) | wc -l)
echo "no operating-system code outside src/base/sys_*.cc ($count files checked)"
