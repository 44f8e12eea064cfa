#include "gpu/vk_api.h"

#include <dlfcn.h>

#include <mutex>

namespace tandem::gpu {

namespace {

// The loader's names: Linux, then macOS (the Vulkan SDK's loader, or MoltenVK alone).
constexpr const char* kLoaderNames[] = {"libvulkan.so.1", "libvulkan.so", "libvulkan.1.dylib",
                                        "libMoltenVK.dylib"};

Result<const VulkanApi*> Load() {
  static VulkanApi api;
  void* lib = nullptr;
  for (const char* name : kLoaderNames) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (lib == nullptr) {
    return Status::Unavailable("no Vulkan loader (libvulkan.so.1) on this machine");
  }
  api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (api.vkGetInstanceProcAddr == nullptr) return Status::Unavailable("the Vulkan loader has no vkGetInstanceProcAddr");
  api.vkCreateInstance =
      reinterpret_cast<PFN_vkCreateInstance>(api.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkCreateInstance"));
  api.vkEnumerateInstanceVersion = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      api.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"));
  uint32_t version = VK_API_VERSION_1_0;
  if (api.vkEnumerateInstanceVersion != nullptr) api.vkEnumerateInstanceVersion(&version);
  if (api.vkCreateInstance == nullptr || version < VK_API_VERSION_1_2) {
    return Status::Unavailable("the Vulkan loader is older than Vulkan 1.2");
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tandem";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  // MoltenVK is a portability driver: the loader lists it only when asked to.
  const char* portability = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
#ifdef __APPLE__
  ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  ci.enabledExtensionCount = 1;
  ci.ppEnabledExtensionNames = &portability;
#else
  (void)portability;
#endif
  const VkResult r = api.vkCreateInstance(&ci, nullptr, &api.instance);
  if (r != VK_SUCCESS) {
    return Status::Unavailable("no Vulkan driver could start (vkCreateInstance: " + VkResultName(r) + ")");
  }
#define TANDEM_VK_LOAD(name)                                                                         \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(api.instance, #name));           \
  if (api.name == nullptr) return Status::Unavailable("the Vulkan loader has no " #name);
  TANDEM_VK_INSTANCE_FUNCTIONS(TANDEM_VK_LOAD)
#undef TANDEM_VK_LOAD
  return static_cast<const VulkanApi*>(&api);
}

}  // namespace

Result<const VulkanApi*> LoadVulkan() {
  static std::once_flag once;
  static Result<const VulkanApi*> loaded = Status::Internal("not loaded");
  std::call_once(once, [] { loaded = Load(); });
  return loaded;
}

Status LoadDeviceApi(const VulkanApi& api, VkDevice device, DeviceApi* out) {
#define TANDEM_VK_LOAD(name)                                                          \
  out->name = reinterpret_cast<PFN_##name>(api.vkGetDeviceProcAddr(device, #name));  \
  if (out->name == nullptr) return Status::Unsupported("the Vulkan driver has no " #name);
  TANDEM_VK_DEVICE_FUNCTIONS(TANDEM_VK_LOAD)
#undef TANDEM_VK_LOAD
  return Status::Ok();
}

std::string VkResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

}  // namespace tandem::gpu
