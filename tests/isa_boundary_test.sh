#!/usr/bin/env bash
# ISA-specific code lives only in src/kernels (one binary runs on any x86-64 or ARM64 machine
# because only the kernel tables are compiled per instruction set and chosen at start). Fails,
# listing the lines, when a source file elsewhere under src/, tests/ or bench/ includes an
# intrinsics header, tests an ISA macro or calls an SSE/AVX/NEON intrinsic.
# Usage: isa_boundary_test.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: isa_boundary_test.sh SOURCE_ROOT}
source "$(dirname "$0")/boundary_lib.sh"
require_tree "$root" src src/kernels tests bench
pattern='[a-z0-9]*intrin\.h|arm_neon\.h|arm_sve\.h|__(AVX|SSE|FMA|F16C|ARM_NEON|ARM_FEATURE|aarch64|x86_64)|\b_mm(256|512)?_[a-z]|\b__m(128|256|512)|\bv(ld|st)[1-4]q?_[a-z]|\bv[a-z]+q_[su](8|16|32|64)\b'
found=$(grep -rnE --include='*.h' --include='*.cc' --include='*.cpp' "$pattern" \
          "$root/src" "$root/tests" "$root/bench" | grep -v "^$root/src/kernels/" || true)
if [[ -n "$found" ]]; then
  echo "ISA-specific code outside src/kernels:"
  echo "$found"
  exit 1
fi
count=$(find "$root/src" "$root/tests" "$root/bench" \( -name '*.h' -o -name '*.cc' -o -name '*.cpp' \) \
          -not -path "$root/src/kernels/*" | wc -l)
echo "no ISA-specific code outside src/kernels ($count files checked)"
