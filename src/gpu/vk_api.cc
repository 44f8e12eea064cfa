#include "gpu/vk_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string_view>
#include <vector>

#include "base/sys.h"

namespace tandem::gpu {

namespace {

Result<const VulkanApi*> Load() {
  static VulkanApi api;
  void* lib = nullptr;
  const std::vector<std::string> names = sys::VulkanLoaderNames();
  for (const std::string& name : names) {
    if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (lib == nullptr) return Status::Unavailable("no Vulkan loader (" + names[0] + ") on this machine");
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
  // MoltenVK is a portability driver: the loader lists it only when asked to, which needs the
  // instance extension (offered by loaders that know about portability drivers).
  const char* portability = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
  auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceExtensionProperties>(
      api.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceExtensionProperties"));
  uint32_t n_ext = 0;
  if (enumerate != nullptr) enumerate(nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> ext(n_ext);
  if (n_ext > 0) enumerate(nullptr, &n_ext, ext.data());
  for (const VkExtensionProperties& e : ext) {
    if (std::string_view(e.extensionName) == portability) {
      ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
      ci.enabledExtensionCount = 1;
      ci.ppEnabledExtensionNames = &portability;
    }
  }
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
    case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
    default: return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

}  // namespace tandem::gpu
