# Cross-compiles tandem for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu and runs the
# resulting test executables under qemu-user (package qemu-user):
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#     -DTANDEM_KERNELS_ONLY=ON
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian's multiarch cross libraries live here; qemu finds the dynamic loader and libraries in it.
set(_tandem_aarch64_root /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${_tandem_aarch64_root})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# CTest (and gtest_discover_tests) run the aarch64 executables through this.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L ${_tandem_aarch64_root})
