// The Vulkan entry points tandem uses, loaded at run time from the system's loader (dlopen), so
// the binary starts on machines without one and says so instead of failing to link.
//
// Thread safety: Load() may be called from any thread (it loads once); the table is read-only
// afterwards.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

#include "base/status.h"

namespace tandem::gpu {

// Global and instance-level functions (vkGetInstanceProcAddr with the instance).
#define TANDEM_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

// Device-level functions (vkGetDeviceProcAddr).
#define TANDEM_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkBindBufferMemory)               \
  X(vkMapMemory)                      \
  X(vkUnmapMemory)                    \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreateDescriptorSetLayout)      \
  X(vkDestroyDescriptorSetLayout)     \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkAllocateCommandBuffers)         \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkResetCommandBuffer)             \
  X(vkCmdBindPipeline)                \
  X(vkCmdPushConstants)               \
  X(vkCmdPushDescriptorSetKHR)        \
  X(vkCmdDispatch)                    \
  X(vkCmdPipelineBarrier)             \
  X(vkCmdCopyBuffer)                  \
  X(vkQueueSubmit)                    \
  X(vkQueueWaitIdle)                  \
  X(vkCreateFence)                    \
  X(vkDestroyFence)                   \
  X(vkWaitForFences)                  \
  X(vkResetFences)                    \
  X(vkCreateQueryPool)                \
  X(vkDestroyQueryPool)               \
  X(vkCmdResetQueryPool)              \
  X(vkCmdWriteTimestamp)              \
  X(vkGetQueryPoolResults)

struct VulkanApi {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
  VkInstance instance = VK_NULL_HANDLE;
#define TANDEM_VK_MEMBER(name) PFN_##name name = nullptr;
  TANDEM_VK_INSTANCE_FUNCTIONS(TANDEM_VK_MEMBER)
#undef TANDEM_VK_MEMBER
};

// The loader and one instance for the process, created on first call. Unavailable (saying why:
// no loader library, no driver) when Vulkan cannot be used here.
Result<const VulkanApi*> LoadVulkan();

// The device-level table of one VkDevice.
struct DeviceApi {
#define TANDEM_VK_MEMBER(name) PFN_##name name = nullptr;
  TANDEM_VK_DEVICE_FUNCTIONS(TANDEM_VK_MEMBER)
#undef TANDEM_VK_MEMBER
};
Status LoadDeviceApi(const VulkanApi& api, VkDevice device, DeviceApi* out);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" and so on.
std::string VkResultName(VkResult r);

}  // namespace tandem::gpu
