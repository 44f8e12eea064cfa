// Shared by every shader: 8- and 16-bit storage (MoltenVK has both), byte readers.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

// Grid-stride loops over more elements than one dispatch's groups cover.
#define GRID_STRIDE (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
