#!/usr/bin/env bash
# The main job on an embedded default: install, build, make a small random-weight model with
# tandem's own code (Q4_K_M, with a synthetic vocabulary), show what is in it, and generate text
# from it. Random weights give made-up syllables; the point is the whole path runs.
# (Later: the same split across local worker processes.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
tandem="$root/build/src/apps/tandem"
mkdir -p "$root/out"
"$tandem" make-model --shape tiny --type q4_K_M -o "$root/out/tiny-q4_k_m.gguf"
"$tandem" inspect "$root/out/tiny-q4_k_m.gguf" | sed -n '1,20p'
echo "== generating"
"$tandem" run -m "$root/out/tiny-q4_k_m.gguf" -p "Once upon a time" -n 48 --temp 0.8 -s 42
