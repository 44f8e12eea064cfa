#!/usr/bin/env bash
# Checks that os_boundary_test.sh can fail: in a scratch tree shaped like tandem's, each planted
# OS-specific line must make it fail, and the same line in a comment or in src/base/sys_*.cc must not.
# Usage: os_boundary_selftest.sh PATH/TO/os_boundary_test.sh
set -euo pipefail
check=${1:?usage: os_boundary_selftest.sh OS_BOUNDARY_TEST}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t/src/base" "$tmp/t/src/net" "$tmp/t/tests" "$tmp/t/bench"
  echo 'int Clean() { return 0; }' > "$tmp/t/src/net/clean.cc"
}
failures=0
expect() {  # expect pass|fail FILE LINE
  local want=$1 file=$2 line=$3
  fresh
  printf '%s\n' "$line" > "$tmp/t/$file"
  if "$check" "$tmp/t" > "$tmp/out" 2>&1; then got=pass; else got=fail; fi
  if [[ $got != "$want" ]]; then
    echo "FAIL: '$line' in $file: expected $want, got $got"; cat "$tmp/out"; failures=$((failures + 1))
  fi
}
expect fail src/net/a.cc '#include <sys/auxv.h>'
expect fail src/net/a.cc '  const int fd = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);'
expect fail tests/a.cc 'std::ifstream in("/proc/meminfo");'
expect fail bench/a.cc '#ifdef __linux__'
expect fail src/net/a.h '#if defined(__APPLE__)'
expect fail src/base/thread_pool.cc 'pthread_setaffinity_np(t, sizeof s, &s);'
expect fail src/base/a.cc 'sysctlbyname("hw.memsize", &v, &n, nullptr, 0);'
expect fail tests/linkemu.cc '#include <sys/eventfd.h>'
expect pass src/net/a.cc '// accept4 and SOCK_CLOEXEC are behind sys::AcceptSocket'
expect pass src/base/sys_linux.cc '#include <sys/auxv.h>'
expect pass src/base/sys_darwin.cc '#include <sys/sysctl.h>'
expect pass src/net/a.cc 'int fd = sys::OpenSocket(AF_INET, SOCK_STREAM, 0, true);'
# Not a source tree at all: fails rather than checking nothing.
if "$check" "$tmp/nowhere" > /dev/null 2>&1; then echo "FAIL: passed on a missing tree"; failures=$((failures + 1)); fi
echo "$((13 - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
