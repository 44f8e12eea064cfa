# Shared by the boundary tests: source it, then `require_tree ROOT DIR...` exits 1 (so the test
# fails rather than checking nothing) unless every DIR exists under ROOT.
require_tree() {
  local root=$1 d
  shift
  for d in "$@"; do
    [[ -d "$root/$d" ]] || { echo "not a tandem source tree: no $root/$d"; exit 1; }
  done
}
