#!/usr/bin/env bash
# build.sh [BUILD_DIR] [extra cmake args...]: configures and builds tandem (Release by default).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
cmake -S "$root" -B "$dir" -G Ninja "$@"
cmake --build "$dir" --parallel "$(nproc)"
