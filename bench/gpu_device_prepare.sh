#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu_device_check.sh needs on a lent GPU machine (the
# `device` tool of this workplace; see docs/architecture.md, "The device layer"): the Release
# binaries `tandem`, `gpu_bench` and `model_reference_test` with the Debian libraries they link
# (but glibc's own, which the other machine has) and a part of ../shared/reference (the models
# named below with their reference logits, for the GPU reference tests there), packed into
# .devpack/devbin.tar.xz (xz: the libraries alone are 50 MB, over the 64 MiB a run may carry),
# and the Vulkan loader's Debian package in .gl/. These are transport only, git-ignored through
# .git/info/exclude and never committed; name .devpack and .gl in the run's `carry`.
# Usage: bench/gpu_device_prepare.sh [BUILD_DIR] [SHARED_DIR]   (defaults build, ../shared; it must be built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shared=${2:-$root/../shared}
cd "$root"
for d in .devbin .devpack .gl; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
rm -rf .devbin .devpack && mkdir -p .devbin/lib .devpack
cp "$build/src/apps/tandem" "$build/bench/gpu_bench" "$build/tests/model_reference_test" .devbin/
for bin in .devbin/tandem .devbin/gpu_bench .devbin/model_reference_test; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;  # the system's own
      *) cp -L "$lib" .devbin/lib/ ;;
    esac
  done
done
# Every weight type a decode step reads most, the float path, and each architecture family but
# the largest files (the pack must stay under the carry limit with the binaries).
mkdir -p .devbin/shared/reference/models .devbin/shared/reference/logits
cp "$shared/reference/README.md" .devbin/shared/reference/
for m in stories260K tiny-f16 tiny-q4_0 tiny-q8_0 tiny-q4_k_m tiny-q5_k_m tiny-q6_k tiny-q2_k tiny-q3_k_m \
         tiny-qwen2-q4_k_m tiny-qwen3-q4_k_m tiny-gemma3-q4_k_m tiny-qwen3moe-q4_k_m; do
  cp "$shared/reference/models/$m.gguf" .devbin/shared/reference/models/
  cp "$shared/reference/logits/$m".*.json .devbin/shared/reference/logits/
done
tar -C "$root" -cf - .devbin | xz -6 -T0 > .devpack/devbin.tar.xz
if ! ls .gl/libvulkan1_*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1)
fi
du -sh .devbin .devpack .gl
# What travels: these and the checkout's own files.
total=$(( $(du -sb .devpack .gl | awk '{s += $1} END {print s}') + $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) ))
if (( total > 60 * 1024 * 1024 )); then
  echo "gpu_device_prepare: .devpack, .gl and the checkout hold $total bytes, too close to the 64 MiB a run carries" >&2
  exit 1
fi
