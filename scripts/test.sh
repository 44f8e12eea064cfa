#!/usr/bin/env bash
# Installs, builds and runs every test:
#   1. the Release build and its CTest suite (unit, golden-file and command-line tests);
#   1b. an ASan/UBSan build of `tandem` (at -O1) and the server soak against it (tests/server/soak.mjs);
#   2. the aarch64 cross build of base/gguf/quant/kernels and their unit tests under qemu-user;
#   3. the macOS compile gate: every translation unit of `tandem` compiled for aarch64-macos;
#   4. the clang fuzz build (ASan + UBSan + libFuzzer) and its bounded fuzz runs.
# TANDEM_FUZZ_SECONDS (default 60) sets how long each fuzzer runs. Each step's header gives the
# seconds since the start, so that a CI log shows what each step took (CI allows 90 minutes for
# everything; this script should stay well under 30).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
step() { echo "== $1 (at ${SECONDS} s)"; }
step "installing packages"
"$root/scripts/install-deps.sh"

step "release build and tests"
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure --parallel "$jobs"

step "ASan/UBSan build of tandem, the server soak against it"
# At -O1, the level the sanitizers' own documentation suggests: it compiles in 5.5 minutes where
# -O3 takes 8 (2 cores), and the soak still takes seconds.
cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF > /dev/null
cmake --build "$root/build-asan" --parallel "$jobs" --target tandem
stories="${TANDEM_SHARED_DIR:-$root/../shared}/reference/models/stories260K.gguf"
status=0
node "$root/tests/server/soak.mjs" "$root/build-asan/src/apps/tandem" "$stories" 300 --sanitized || status=$?
if [[ $status -eq 77 ]]; then echo "(soak skipped: no shared reference model)"; elif [[ $status -ne 0 ]]; then exit $status; fi

step "arm64 cross build, tests under qemu"
"$root/scripts/build.sh" "$root/build-arm64" -DTANDEM_KERNELS_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake"
ctest --test-dir "$root/build-arm64" --output-on-failure --parallel "$jobs"

step "macOS compile gate (aarch64-macos with Zig's clang, warnings as errors, no link)"
"$root/scripts/macos-compile-check.sh" "$root/build-macos"

step "fuzz build (clang, ASan, UBSan) and bounded fuzzing"
CC=clang CXX=clang++ "$root/scripts/build.sh" "$root/build-fuzz" -DTANDEM_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_FUZZ_SECONDS="${TANDEM_FUZZ_SECONDS:-60}"
# Each fuzzer runs on one thread for a fixed time: side by side they fuzz as long, in half the wall time.
ctest --test-dir "$root/build-fuzz" --output-on-failure --verbose --parallel "$jobs"
step "done"
