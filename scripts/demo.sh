#!/usr/bin/env bash
# The main job on an embedded default: install, build, make a small model with tandem's own
# code, and inspect it. (Later: generate text split across local worker processes.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
mkdir -p "$root/out"
"$root/build/src/apps/tandem" make-model --shape tiny --type f32 -o "$root/out/tiny-f32.gguf"
"$root/build/src/apps/tandem" inspect "$root/out/tiny-f32.gguf"
