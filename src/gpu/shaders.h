// The SPIR-V of gpu/shaders/*.comp, compiled by glslc at build time (one entry per variant:
// "mul_q4_k", "attn_f16_q8_0", ...; src/gpu/CMakeLists.txt lists them) and embedded.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tandem::gpu {

// The shader's SPIR-V bytes; empty when there is no shader of that name.
std::span<const uint8_t> ShaderCode(std::string_view name);

}  // namespace tandem::gpu
