# BLAKE3 (the model content digests: fast enough to hash a model at several GB/s per core, which
# BLAKE2b and SHA-256 on this class of CPU are not, at about 1 GB/s).
#
# Defines the target tandem_blake3. Where a system library exists (Homebrew's `blake3`, Debian 13's
# libblake3-dev) it is used. Debian 12 has no C library package, but its librust-blake3-dev ships
# the official C implementation under /usr/share/cargo/registry/blake3-*/c; that source is built
# here, as a third-party library (never copied into this tree), with each SIMD file at its own ISA
# flags: the library picks the widest one the CPU has at run time.
set(BLAKE3_SOURCE_DIR "" CACHE PATH "BLAKE3's C sources (found under /usr/share/cargo/registry when empty)")
if(NOT BLAKE3_SOURCE_DIR)
  file(GLOB _blake3_dirs LIST_DIRECTORIES true /usr/share/cargo/registry/blake3-*/c)
  if(_blake3_dirs)
    list(SORT _blake3_dirs COMPARE NATURAL)
    list(GET _blake3_dirs -1 BLAKE3_SOURCE_DIR)
  endif()
endif()

if(BLAKE3_SOURCE_DIR)
  set(_b3 ${BLAKE3_SOURCE_DIR})
  add_library(tandem_blake3 STATIC ${_b3}/blake3.c ${_b3}/blake3_dispatch.c ${_b3}/blake3_portable.c)
  target_include_directories(tandem_blake3 SYSTEM PUBLIC ${_b3})
  # Third-party code: its warnings are not ours to fix.
  target_compile_options(tandem_blake3 PRIVATE -w)
  set_target_properties(tandem_blake3 PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    target_sources(tandem_blake3 PRIVATE ${_b3}/blake3_sse2.c ${_b3}/blake3_sse41.c ${_b3}/blake3_avx2.c
                                         ${_b3}/blake3_avx512.c)
    set_source_files_properties(${_b3}/blake3_sse2.c PROPERTIES COMPILE_OPTIONS -msse2)
    set_source_files_properties(${_b3}/blake3_sse41.c PROPERTIES COMPILE_OPTIONS -msse4.1)
    set_source_files_properties(${_b3}/blake3_avx2.c PROPERTIES COMPILE_OPTIONS -mavx2)
    set_source_files_properties(${_b3}/blake3_avx512.c PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512vl")
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    target_sources(tandem_blake3 PRIVATE ${_b3}/blake3_neon.c)
    target_compile_definitions(tandem_blake3 PRIVATE BLAKE3_USE_NEON=1)
  else()
    target_compile_definitions(tandem_blake3 PRIVATE BLAKE3_NO_SSE2 BLAKE3_NO_SSE41 BLAKE3_NO_AVX2
                                                     BLAKE3_NO_AVX512 BLAKE3_USE_NEON=0)
  endif()
else()
  find_library(BLAKE3_LIB blake3)
  find_path(BLAKE3_INCLUDE_DIR blake3.h)
  if(NOT BLAKE3_LIB OR NOT BLAKE3_INCLUDE_DIR)
    message(FATAL_ERROR "BLAKE3 not found: install librust-blake3-dev (Debian 12, scripts/install-deps.sh), "
                        "libblake3-dev (Debian 13) or Homebrew's blake3")
  endif()
  add_library(tandem_blake3 INTERFACE)
  target_link_libraries(tandem_blake3 INTERFACE ${BLAKE3_LIB})
  target_include_directories(tandem_blake3 SYSTEM INTERFACE ${BLAKE3_INCLUDE_DIR})
endif()
