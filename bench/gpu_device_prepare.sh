#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu_device_check.sh needs on a lent GPU machine (the
# `device` tool of this workplace; see docs/architecture.md, "The device layer"): the Release
# binaries `tandem` and `gpu_bench` with the Debian libraries they link (but glibc's own, which
# the other machine has), in .devbin/, and the Vulkan loader's Debian package in .gl/. Both folders
# are git-ignored through .git/info/exclude; name them in the run's `carry`.
# Usage: bench/gpu_device_prepare.sh [BUILD_DIR]   (default build; it must be built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cd "$root"
for d in .devbin .gl; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
rm -rf .devbin && mkdir -p .devbin/lib
cp "$build/src/apps/tandem" "$build/bench/gpu_bench" .devbin/
for bin in .devbin/tandem .devbin/gpu_bench; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;  # the system's own
      *) cp -L "$lib" .devbin/lib/ ;;
    esac
  done
done
if ! ls .gl/libvulkan1_*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1)
fi
du -sh .devbin .gl
