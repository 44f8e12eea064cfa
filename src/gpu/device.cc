#include "gpu/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "gpu/shaders.h"
#include "gpu/vk_api.h"

namespace tandem::gpu {

namespace {

struct KernelSpec {
  const char* name;  // the embedded SPIR-V (gpu/shaders.h)
  uint32_t bindings;
};
constexpr KernelSpec kKernels[] = {
    {"mul_f32", 5},       {"mul_f16", 5},       {"mul_bf16", 5},      {"mul_q4_0", 5},   {"mul_q4_1", 5},
    {"mul_q5_0", 5},      {"mul_q5_1", 5},      {"mul_q8_0", 5},      {"mul_q2_k", 5},   {"mul_q3_k", 5},
    {"mul_q4_k", 5},      {"mul_q5_k", 5},      {"mul_q6_k", 5},      {"rmsnorm", 3},
    {"add", 2},           {"act_mul", 2},
    {"rope_store_f16_f16", 7}, {"rope_store_f16_q8_0", 7}, {"rope_store_q8_0_f16", 7}, {"rope_store_q8_0_q8_0", 7},
    {"attn_f16_f16", 6},  {"attn_f16_q8_0", 6}, {"attn_q8_0_f16", 6}, {"attn_q8_0_q8_0", 6},
    {"gather", 3},        {"softcap", 1},
    {"mulid_f32", 4},     {"mulid_f16", 4},     {"mulid_bf16", 4},    {"mulid_q4_0", 4}, {"mulid_q4_1", 4},
    {"mulid_q5_0", 4},    {"mulid_q5_1", 4},    {"mulid_q8_0", 4},    {"mulid_q2_k", 4}, {"mulid_q3_k", 4},
    {"mulid_q4_k", 4},    {"mulid_q5_k", 4},    {"mulid_q6_k", 4},    {"moe_route", 3},  {"moe_combine", 3},
    {"read", 2},          {"act_round_q8_0", 2}, {"act_round_q8_k", 2},
    {"gated_add", 3},
    {"mul_tiles_f32", 5},  {"mul_tiles_f16", 5},  {"mul_tiles_bf16", 5}, {"mul_tiles_q4_0", 5},
    {"mul_tiles_q4_1", 5}, {"mul_tiles_q5_0", 5}, {"mul_tiles_q5_1", 5}, {"mul_tiles_q8_0", 5},
    {"mul_tiles_q2_k", 5}, {"mul_tiles_q3_k", 5}, {"mul_tiles_q4_k", 5}, {"mul_tiles_q5_k", 5},
    {"mul_tiles_q6_k", 5},
    {"rmsnorm_q8_0", 4},  {"rmsnorm_q8_k", 4},  {"act_mul_q8_0", 3},  {"act_mul_q8_k", 3},
};
static_assert(std::size(kKernels) == static_cast<size_t>(Kernel::kCount));
constexpr uint32_t kMaxPushBytes = 64;  // Vulkan guarantees 128
constexpr uint64_t kStagingBytes = uint64_t{64} << 20;

Status VkError(const DeviceInfo& info, const std::string& what, VkResult r) {
  const std::string m = info.name + " (" + info.description + "): " + what + " failed: " + VkResultName(r);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) return Status::ResourceExhausted(m);
  if (r == VK_ERROR_DEVICE_LOST) return Status::Unavailable(m + " (the device was lost)");
  return Status::Internal(m);
}

bool HasExtension(const VulkanApi& api, VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
  return std::any_of(ext.begin(), ext.end(), [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

DeviceInfo Describe(const VulkanApi& api, VkPhysicalDevice pd, int index) {
  DeviceInfo info;
  info.index = index;
  info.name = "Vulkan" + std::to_string(index);
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sub;
  api.vkGetPhysicalDeviceProperties2(pd, &props);
  info.description = props.properties.deviceName;
  info.software = props.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  info.max_binding_bytes = props.properties.limits.maxStorageBufferRange;
  info.subgroup_size = sub.subgroupSize;
  info.timestamp_ns = props.properties.limits.timestampPeriod;
  VkPhysicalDeviceMemoryProperties mem;
  api.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      info.memory_bytes = std::max<uint64_t>(info.memory_bytes, mem.memoryHeaps[h].size);
    }
  }
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f.pNext = &f11;
  api.vkGetPhysicalDeviceFeatures2(pd, &f);
  if (props.properties.apiVersion < VK_API_VERSION_1_2) {
    info.unusable = "Vulkan 1.2 is needed";
  } else if (!f12.storageBuffer8BitAccess) {
    info.unusable = "no 8-bit storage buffers";
  } else if (!f11.storageBuffer16BitAccess) {
    info.unusable = "no 16-bit storage buffers";
  } else if (!HasExtension(api, pd, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) {
    info.unusable = "no VK_KHR_push_descriptor";
  } else if (props.properties.limits.maxComputeSharedMemorySize < 16384) {
    info.unusable = "less than 16 KiB of shared memory per workgroup";
  } else if (!(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
             !(sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)) {
    info.unusable = "no subgroup arithmetic in compute shaders";
  }
  return info;
}

Result<std::vector<VkPhysicalDevice>> PhysicalDevices(const VulkanApi& api) {
  uint32_t n = 0;
  VkResult r = api.vkEnumeratePhysicalDevices(api.instance, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  if (r == VK_SUCCESS && n > 0) r = api.vkEnumeratePhysicalDevices(api.instance, &n, pds.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    return Status::Unavailable("Vulkan could not list devices: " + VkResultName(r));
  }
  pds.resize(n);
  return pds;
}

}  // namespace

const char* KernelName(Kernel k) { return kKernels[static_cast<int>(k)].name; }

std::optional<Kernel> MulKernelFor(quant::TensorType type, bool expert) {
  using quant::TensorType;
  // In the order of the kMul* (and kMulId*) kernels.
  static constexpr TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ4_0,
                                          TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ8_0,
                                          TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K, TensorType::kQ5_K,
                                          TensorType::kQ6_K};
  static_assert(static_cast<int>(Kernel::kMulQ6_K) - static_cast<int>(Kernel::kMulF32) + 1 == std::size(kTypes));
  static_assert(static_cast<int>(Kernel::kMulIdQ6_K) - static_cast<int>(Kernel::kMulIdF32) + 1 == std::size(kTypes));
  static_assert(static_cast<int>(Kernel::kMulTilesQ6_K) - static_cast<int>(Kernel::kMulTilesF32) + 1 ==
                std::size(kTypes));
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    if (kTypes[i] == type) {
      return static_cast<Kernel>(static_cast<int>(expert ? Kernel::kMulIdF32 : Kernel::kMulF32) + static_cast<int>(i));
    }
  }
  return std::nullopt;
}

Result<std::vector<DeviceInfo>> ListDevices() {
  TANDEM_ASSIGN_OR_RETURN(const VulkanApi* api, LoadVulkan());
  TANDEM_ASSIGN_OR_RETURN(std::vector<VkPhysicalDevice> pds, PhysicalDevices(*api));
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < pds.size(); ++i) out.push_back(Describe(*api, pds[i], static_cast<int>(i)));
  return out;
}

Result<DeviceChoice> ChooseDevice(const std::string& name) {
  DeviceChoice choice;
  if (name == "CPU" || name == "cpu" || name == "none") return choice;
  if (name.empty() || name == "auto") {
    Result<std::vector<DeviceInfo>> list = ListDevices();
    if (!list.ok()) {
      choice.note = list.status().message() + ": running on the CPU";
      return choice;
    }
    std::string skipped;
    for (const DeviceInfo& d : *list) {
      if (!d.unusable.empty() || d.software) {
        skipped += (skipped.empty() ? "" : ", ") + d.name + " " + d.description +
                   (d.software ? " is a software driver" : " lacks " + d.unusable);
        continue;
      }
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, Device::Open(d.index));
      choice.device = std::move(dev);
      return choice;
    }
    choice.note = "no usable GPU" + (skipped.empty() ? std::string() : " (" + skipped + ")") + ": running on the CPU";
    return choice;
  }
  if (name.rfind("Vulkan", 0) == 0 && name.size() > 6 && name.size() < 10 &&
      name.find_first_not_of("0123456789", 6) == std::string::npos) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Device> dev, Device::Open(std::stoi(name.substr(6))));
    choice.device = std::move(dev);
    return choice;
  }
  return Status::InvalidArgument("unknown device '" + name + "' (CPU, Vulkan0, Vulkan1, ...; --list-devices shows them)");
}

struct Buffer::Handles {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t bytes = 0;  // allocated
};

struct Stream::Handles {
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  bool recording = false;
  bool replayable = false;  // a complete recording was submitted without error
  // Profiling: the recording writes timestamp 0 first and i + 1 after its command i, labelled
  // labels[i] (a Kernel, or -1 for a copy).
  bool profiled = false;
  VkQueryPool queries = VK_NULL_HANDLE;
  std::vector<int> labels;
};
// Timestamps one recording holds at most (commands beyond are not timed).
constexpr uint32_t kMaxTimestamps = 4096;

struct Device::Impl {
  const VulkanApi* api = nullptr;
  DeviceApi d;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkPhysicalDeviceMemoryProperties mem{};
  std::mutex queue_mutex;  // vkQueueSubmit needs external synchronisation
  std::mutex pipeline_mutex;
  struct Pipe {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkPipeline pipeline = VK_NULL_HANDLE;
    Status error;  // a build that failed stays failed
    bool tried = false;
  };
  Pipe pipes[static_cast<int>(Kernel::kCount)];
  std::unique_ptr<Buffer> staging;   // host-visible, for Upload and Download
  std::unique_ptr<Stream> transfer;  // their command buffer
  std::mutex transfer_mutex;
  std::atomic<bool> lost{false};     // the driver answered VK_ERROR_DEVICE_LOST
  std::atomic<bool> profiling{false};
  std::mutex profile_mutex;
  std::vector<Device::ProfileEntry> profile;  // indexed by label + 1 (0: copies)
};

namespace {
// The driver's answers under Device::InjectFaultForTesting.
VKAPI_ATTR VkResult VKAPI_CALL LostQueueSubmit(VkQueue, uint32_t, const VkSubmitInfo*, VkFence) {
  return VK_ERROR_DEVICE_LOST;
}
VKAPI_ATTR VkResult VKAPI_CALL FailedPipelineBuild(VkDevice, VkPipelineCache, uint32_t,
                                                   const VkComputePipelineCreateInfo*, const VkAllocationCallbacks*,
                                                   VkPipeline*) {
  return VK_ERROR_UNKNOWN;
}
}  // namespace

bool Device::lost() const { return impl_->lost.load(); }

bool Device::profiling() const { return impl_->profiling.load(); }

Status Device::StartProfile() {
  if (info_.timestamp_ns <= 0) {
    return Status::Unsupported(info_.name + " (" + info_.description + ") has no timestamps on its compute queue");
  }
  std::lock_guard<std::mutex> lock(impl_->profile_mutex);
  impl_->profile.assign(static_cast<size_t>(Kernel::kCount) + 1, ProfileEntry{});
  impl_->profile[0].name = "copy";
  for (int k = 0; k < static_cast<int>(Kernel::kCount); ++k) impl_->profile[k + 1].name = kKernels[k].name;
  impl_->profiling = true;
  return Status::Ok();
}

std::vector<Device::ProfileEntry> Device::StopProfile() {
  std::lock_guard<std::mutex> lock(impl_->profile_mutex);
  impl_->profiling = false;
  std::vector<ProfileEntry> out;
  for (const ProfileEntry& e : impl_->profile) {
    if (e.calls > 0) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.ms > b.ms; });
  impl_->profile.clear();
  return out;
}

void Device::InjectFaultForTesting(Fault fault) {
  Impl& im = *impl_;
  if (fault == Fault::kDeviceLost) {
    std::lock_guard<std::mutex> lock(im.queue_mutex);
    im.d.vkQueueSubmit = LostQueueSubmit;
  } else {
    std::lock_guard<std::mutex> lock(im.pipeline_mutex);
    im.d.vkCreateComputePipelines = FailedPipelineBuild;
  }
}

Buffer::Buffer() = default;
Stream::Stream(Device* d) : device_(d) {}
Device::Device() = default;

Result<std::unique_ptr<Device>> Device::Open(int index) {
  TANDEM_ASSIGN_OR_RETURN(const VulkanApi* api, LoadVulkan());
  TANDEM_ASSIGN_OR_RETURN(std::vector<VkPhysicalDevice> pds, PhysicalDevices(*api));
  if (index < 0 || index >= static_cast<int>(pds.size())) {
    return Status::InvalidArgument("no device Vulkan" + std::to_string(index) + " (this machine has " +
                                   std::to_string(pds.size()) + " Vulkan device" + (pds.size() == 1 ? "" : "s") +
                                   "; --list-devices shows them)");
  }
  std::unique_ptr<Device> dev(new Device());
  dev->info_ = Describe(*api, pds[index], index);
  if (!dev->info_.unusable.empty()) {
    return Status::Unsupported(dev->info_.name + " (" + dev->info_.description + ") cannot run tandem: " +
                               dev->info_.unusable);
  }
  dev->impl_ = std::make_unique<Impl>();
  Impl& im = *dev->impl_;
  im.api = api;
  im.pd = pds[index];
  api->vkGetPhysicalDeviceMemoryProperties(im.pd, &im.mem);
  uint32_t nq = 0;
  api->vkGetPhysicalDeviceQueueFamilyProperties(im.pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  api->vkGetPhysicalDeviceQueueFamilyProperties(im.pd, &nq, qf.data());
  uint32_t family = nq;
  for (uint32_t i = 0; i < nq && family == nq; ++i) {
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
  }
  if (family == nq) return Status::Unsupported(dev->info_.name + " has no compute queue");
  im.queue_family = family;
  if (qf[family].timestampValidBits == 0) dev->info_.timestamp_ns = 0;

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f11.storageBuffer16BitAccess = VK_TRUE;
  f12.storageBuffer8BitAccess = VK_TRUE;
  f11.pNext = &f12;
  const char* extensions[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME, "VK_KHR_portability_subset"};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f11;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  // MoltenVK must be told that we know it is a portability implementation.
  dci.enabledExtensionCount = HasExtension(*api, im.pd, "VK_KHR_portability_subset") ? 2 : 1;
  dci.ppEnabledExtensionNames = extensions;
  VkResult r = api->vkCreateDevice(im.pd, &dci, nullptr, &im.device);
  if (r != VK_SUCCESS) return VkError(dev->info_, "vkCreateDevice", r);
  TANDEM_RETURN_IF_ERROR(LoadDeviceApi(*api, im.device, &im.d));
  im.d.vkGetDeviceQueue(im.device, family, 0, &im.queue);
  TANDEM_ASSIGN_OR_RETURN(im.staging, dev->NewBuffer(std::min(kStagingBytes, dev->info_.max_binding_bytes), true,
                                                     "the staging buffer"));
  TANDEM_ASSIGN_OR_RETURN(im.transfer, dev->NewStream());
  return dev;
}

Device::~Device() {
  if (impl_ == nullptr || impl_->device == VK_NULL_HANDLE) return;
  Impl& im = *impl_;
  im.d.vkQueueWaitIdle(im.queue);
  im.transfer.reset();
  im.staging.reset();
  for (Impl::Pipe& p : im.pipes) {
    if (p.pipeline != VK_NULL_HANDLE) im.d.vkDestroyPipeline(im.device, p.pipeline, nullptr);
    if (p.layout != VK_NULL_HANDLE) im.d.vkDestroyPipelineLayout(im.device, p.layout, nullptr);
    if (p.set_layout != VK_NULL_HANDLE) im.d.vkDestroyDescriptorSetLayout(im.device, p.set_layout, nullptr);
  }
  im.d.vkDestroyDevice(im.device, nullptr);
}

Result<std::unique_ptr<Buffer>> Device::NewBuffer(uint64_t bytes, bool host_visible, const std::string& what) {
  Impl& im = *impl_;
  if (bytes == 0 || bytes > info_.max_binding_bytes) {
    return Status::InvalidArgument(info_.name + ": " + what + " needs a buffer of " + std::to_string(bytes) +
                                   " bytes; one binding holds 1 to " + std::to_string(info_.max_binding_bytes));
  }
  std::unique_ptr<Buffer> b(new Buffer());
  b->device_ = this;
  b->size_ = bytes;
  b->h_ = std::make_unique<Buffer::Handles>();
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkResult r = im.d.vkCreateBuffer(im.device, &bci, nullptr, &b->h_->buffer);
  if (r != VK_SUCCESS) return VkError(info_, "creating a buffer for " + what, r);
  VkMemoryRequirements req;
  im.d.vkGetBufferMemoryRequirements(im.device, b->h_->buffer, &req);
  const VkMemoryPropertyFlags want = host_visible
                                         ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                         : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  uint32_t type = im.mem.memoryTypeCount;
  for (uint32_t i = 0; i < im.mem.memoryTypeCount && type == im.mem.memoryTypeCount; ++i) {
    if ((req.memoryTypeBits & (1u << i)) && (im.mem.memoryTypes[i].propertyFlags & want) == want) type = i;
  }
  if (type == im.mem.memoryTypeCount) {
    return Status::Unsupported(info_.name + ": no " + (host_visible ? "host-visible" : "device-local") +
                               " memory type for " + what);
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  r = im.d.vkAllocateMemory(im.device, &ai, nullptr, &b->h_->memory);
  if (r != VK_SUCCESS) {
    return VkError(info_, "allocating " + std::to_string(bytes >> 20) + " MiB for " + what + " (" +
                              std::to_string(allocated_bytes() >> 20) + " MiB allocated before)", r);
  }
  allocated_ += req.size;
  b->h_->bytes = req.size;
  r = im.d.vkBindBufferMemory(im.device, b->h_->buffer, b->h_->memory, 0);
  if (r != VK_SUCCESS) return VkError(info_, "binding memory for " + what, r);
  if (host_visible) {
    r = im.d.vkMapMemory(im.device, b->h_->memory, 0, bytes, 0, &b->mapped_);
    if (r != VK_SUCCESS) return VkError(info_, "mapping memory for " + what, r);
  }
  return b;
}

Buffer::~Buffer() {
  if (h_ == nullptr || device_ == nullptr) return;
  Device::Impl& im = *device_->impl_;
  if (h_->buffer != VK_NULL_HANDLE) im.d.vkDestroyBuffer(im.device, h_->buffer, nullptr);
  if (h_->memory != VK_NULL_HANDLE) {
    if (mapped_ != nullptr) im.d.vkUnmapMemory(im.device, h_->memory);
    im.d.vkFreeMemory(im.device, h_->memory, nullptr);
    device_->allocated_.fetch_sub(h_->bytes, std::memory_order_relaxed);
  }
}

Status Device::Transfer(Buffer& host, const Buffer& device_buf, uint64_t offset, uint64_t bytes, bool to_device) {
  Stream& s = *impl_->transfer;
  TANDEM_RETURN_IF_ERROR(s.Begin());
  if (to_device) {
    s.Copy(host, 0, device_buf, offset, bytes);
  } else {
    s.Copy(device_buf, offset, host, 0, bytes);
  }
  return s.Submit();
}

Status Device::Upload(Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (offset + bytes > dst.size()) return Status::OutOfRange(info_.name + ": upload past the end of a buffer");
  if (dst.mapped() != nullptr) {
    std::memcpy(static_cast<uint8_t*>(dst.mapped()) + offset, src, bytes);
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(impl_->transfer_mutex);
  Buffer& staging = *impl_->staging;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(bytes - done, staging.size());
    std::memcpy(staging.mapped(), static_cast<const uint8_t*>(src) + done, n);
    TANDEM_RETURN_IF_ERROR(Transfer(staging, dst, offset + done, n, true));
    done += n;
  }
  return Status::Ok();
}

Status Device::Download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) {
  if (offset + bytes > src.size()) return Status::OutOfRange(info_.name + ": download past the end of a buffer");
  if (src.mapped() != nullptr) {
    std::memcpy(dst, static_cast<const uint8_t*>(src.mapped()) + offset, bytes);
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(impl_->transfer_mutex);
  Buffer& staging = *impl_->staging;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(bytes - done, staging.size());
    TANDEM_RETURN_IF_ERROR(Transfer(staging, src, offset + done, n, false));
    std::memcpy(static_cast<uint8_t*>(dst) + done, staging.mapped(), n);
    done += n;
  }
  return Status::Ok();
}

Status Device::Pipeline(Kernel k, void** pipeline, void** layout) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.pipeline_mutex);
  Impl::Pipe& p = im.pipes[static_cast<int>(k)];
  if (!p.tried) {
    p.tried = true;
    p.error = [&]() -> Status {
      const KernelSpec& spec = kKernels[static_cast<int>(k)];
      const std::string what = "building shader " + std::string(spec.name);
      const std::span<const uint8_t> bytes = ShaderCode(spec.name);
      if (bytes.empty() || bytes.size() % 4 != 0) return Status::Internal(std::string("no embedded shader ") + spec.name);
      std::vector<uint32_t> code(bytes.size() / 4);
      std::memcpy(code.data(), bytes.data(), bytes.size());
      VkDescriptorSetLayoutBinding binds[8];
      for (uint32_t i = 0; i < spec.bindings; ++i) {
        binds[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
      }
      VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
      dl.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
      dl.bindingCount = spec.bindings;
      dl.pBindings = binds;
      VkResult r = im.d.vkCreateDescriptorSetLayout(im.device, &dl, nullptr, &p.set_layout);
      if (r != VK_SUCCESS) return VkError(info_, what, r);
      VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kMaxPushBytes};
      VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
      pl.setLayoutCount = 1;
      pl.pSetLayouts = &p.set_layout;
      pl.pushConstantRangeCount = 1;
      pl.pPushConstantRanges = &range;
      r = im.d.vkCreatePipelineLayout(im.device, &pl, nullptr, &p.layout);
      if (r != VK_SUCCESS) return VkError(info_, what, r);
      VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
      sm.codeSize = code.size() * sizeof(uint32_t);
      sm.pCode = code.data();
      VkShaderModule module = VK_NULL_HANDLE;
      r = im.d.vkCreateShaderModule(im.device, &sm, nullptr, &module);
      if (r != VK_SUCCESS) return VkError(info_, what, r);
      VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
      ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
      ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
      ci.stage.module = module;
      ci.stage.pName = "main";
      ci.layout = p.layout;
      r = im.d.vkCreateComputePipelines(im.device, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipeline);
      im.d.vkDestroyShaderModule(im.device, module, nullptr);
      if (r != VK_SUCCESS) return VkError(info_, what, r);
      return Status::Ok();
    }();
  }
  *pipeline = p.pipeline;
  *layout = p.layout;
  return p.error;
}

Result<std::unique_ptr<Stream>> Device::NewStream() {
  Impl& im = *impl_;
  std::unique_ptr<Stream> s(new Stream(this));
  s->h_ = std::make_unique<Stream::Handles>();
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = im.queue_family;
  VkResult r = im.d.vkCreateCommandPool(im.device, &pci, nullptr, &s->h_->pool);
  if (r != VK_SUCCESS) return VkError(info_, "vkCreateCommandPool", r);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = s->h_->pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  r = im.d.vkAllocateCommandBuffers(im.device, &ai, &s->h_->cmd);
  if (r != VK_SUCCESS) return VkError(info_, "vkAllocateCommandBuffers", r);
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  r = im.d.vkCreateFence(im.device, &fci, nullptr, &s->h_->fence);
  if (r != VK_SUCCESS) return VkError(info_, "vkCreateFence", r);
  return s;
}

Stream::~Stream() {
  if (h_ == nullptr) return;
  Device::Impl& im = *device_->impl_;
  if (h_->fence != VK_NULL_HANDLE) im.d.vkDestroyFence(im.device, h_->fence, nullptr);
  if (h_->queries != VK_NULL_HANDLE) im.d.vkDestroyQueryPool(im.device, h_->queries, nullptr);
  if (h_->pool != VK_NULL_HANDLE) im.d.vkDestroyCommandPool(im.device, h_->pool, nullptr);
}

Status Stream::Begin() {
  Device::Impl& im = *device_->impl_;
  error_ = Status::Ok();
  im.d.vkResetCommandBuffer(h_->cmd, 0);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  h_->replayable = false;
  VkResult r = im.d.vkBeginCommandBuffer(h_->cmd, &bi);
  if (r != VK_SUCCESS) return VkError(device_->info(), "vkBeginCommandBuffer", r);
  h_->recording = true;
  h_->labels.clear();
  h_->profiled = im.profiling && device_->info().timestamp_ns > 0;
  if (h_->profiled) {
    if (h_->queries == VK_NULL_HANDLE) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = kMaxTimestamps;
      r = im.d.vkCreateQueryPool(im.device, &qi, nullptr, &h_->queries);
      if (r != VK_SUCCESS) return VkError(device_->info(), "creating the profile's timestamps", r);
    }
    im.d.vkCmdResetQueryPool(h_->cmd, h_->queries, 0, kMaxTimestamps);
    im.d.vkCmdWriteTimestamp(h_->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, h_->queries, 0);
  }
  return Status::Ok();
}

// After a command (and its barrier): its end, when the recording is profiled.
void Stream::Timestamp(int label) {
  if (!h_->profiled || h_->labels.size() + 1 >= kMaxTimestamps) return;
  h_->labels.push_back(label);
  device_->impl_->d.vkCmdWriteTimestamp(h_->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, h_->queries,
                                        static_cast<uint32_t>(h_->labels.size()));
}

namespace {
// Everything written before is visible to everything after: compute and transfer, both ways.
void FullBarrier(const DeviceApi& d, VkCommandBuffer cmd) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  d.vkCmdPipelineBarrier(cmd, stages, stages | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}
}  // namespace

void Stream::Dispatch(Kernel k, std::initializer_list<const Buffer*> buffers, const void* push, uint32_t push_bytes,
                      uint32_t gx, uint32_t gy, uint32_t gz) {
  if (!error_.ok() || !h_->recording) return;
  const KernelSpec& spec = kKernels[static_cast<int>(k)];
  if (buffers.size() != spec.bindings || push_bytes > kMaxPushBytes) {
    error_ = Status::Internal(std::string("dispatch of ") + spec.name + " with the wrong bindings or push constants");
    return;
  }
  if (gx == 0 || gy == 0 || gz == 0) return;
  void* pipeline = nullptr;
  void* layout = nullptr;
  error_ = device_->Pipeline(k, &pipeline, &layout);
  if (!error_.ok()) return;
  Device::Impl& im = *device_->impl_;
  VkDescriptorBufferInfo infos[8];
  VkWriteDescriptorSet writes[8];
  uint32_t i = 0;
  for (const Buffer* b : buffers) {
    infos[i] = {b->h_->buffer, 0, VK_WHOLE_SIZE};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
    ++i;
  }
  uint8_t pc[kMaxPushBytes] = {};
  std::memcpy(pc, push, push_bytes);
  VkPipelineLayout pl = static_cast<VkPipelineLayout>(layout);
  im.d.vkCmdBindPipeline(h_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, static_cast<VkPipeline>(pipeline));
  im.d.vkCmdPushDescriptorSetKHR(h_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, i, writes);
  im.d.vkCmdPushConstants(h_->cmd, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, kMaxPushBytes, pc);
  im.d.vkCmdDispatch(h_->cmd, gx, gy, gz);
  FullBarrier(im.d, h_->cmd);
  Timestamp(static_cast<int>(k));
}

void Stream::Copy(const Buffer& src, uint64_t src_offset, const Buffer& dst, uint64_t dst_offset, uint64_t bytes) {
  if (!error_.ok() || !h_->recording || bytes == 0) return;
  if (src_offset + bytes > src.size() || dst_offset + bytes > dst.size()) {
    error_ = Status::Internal("a copy past the end of a buffer");
    return;
  }
  Device::Impl& im = *device_->impl_;
  VkBufferCopy region{src_offset, dst_offset, bytes};
  im.d.vkCmdCopyBuffer(h_->cmd, src.h_->buffer, dst.h_->buffer, 1, &region);
  FullBarrier(im.d, h_->cmd);
  Timestamp(-1);
}

Status Stream::Submit() {
  if (!h_->recording) return Status::Internal("Submit without Begin");
  h_->recording = false;
  Device::Impl& im = *device_->impl_;
  const DeviceInfo& info = device_->info();
  VkResult r = im.d.vkEndCommandBuffer(h_->cmd);
  if (!error_.ok()) return error_;
  if (r != VK_SUCCESS) return VkError(info, "vkEndCommandBuffer", r);
  h_->replayable = true;
  return Replay();
}

Status Stream::Replay() {
  Device::Impl& im = *device_->impl_;
  const DeviceInfo& info = device_->info();
  if (im.lost) {
    return Status::Unavailable(info.name + " (" + info.description +
                               "): the device was lost; nothing runs on it until it is opened again");
  }
  if (h_->recording || !h_->replayable) return Status::Internal("nothing recorded to replay");
  VkResult r;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &h_->cmd;
  {
    std::lock_guard<std::mutex> lock(im.queue_mutex);
    r = im.d.vkQueueSubmit(im.queue, 1, &si, h_->fence);
  }
  if (r != VK_SUCCESS) {
    h_->replayable = false;
    if (r == VK_ERROR_DEVICE_LOST) im.lost = true;
    return VkError(info, "vkQueueSubmit", r);
  }
  r = im.d.vkWaitForFences(im.device, 1, &h_->fence, VK_TRUE, UINT64_MAX);
  im.d.vkResetFences(im.device, 1, &h_->fence);
  if (r != VK_SUCCESS) {
    h_->replayable = false;
    if (r == VK_ERROR_DEVICE_LOST) im.lost = true;
    return VkError(info, "waiting for the GPU", r);
  }
  if (h_->profiled && !h_->labels.empty()) {
    const size_t n = h_->labels.size() + 1;
    std::vector<uint64_t> ticks(n);
    r = im.d.vkGetQueryPoolResults(im.device, h_->queries, 0, static_cast<uint32_t>(n), n * sizeof(uint64_t),
                                   ticks.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS) return VkError(info, "reading the profile's timestamps", r);
    std::lock_guard<std::mutex> lock(im.profile_mutex);
    if (!im.profile.empty()) {
      for (size_t i = 0; i + 1 < n; ++i) {
        Device::ProfileEntry& e = im.profile[static_cast<size_t>(h_->labels[i] + 1)];
        e.calls += 1;
        e.ms += static_cast<double>(ticks[i + 1] > ticks[i] ? ticks[i + 1] - ticks[i] : 0) * info.timestamp_ns * 1e-6;
      }
    }
  }
  return Status::Ok();
}

void RecordMul(Stream& s, Kernel mul, const Buffer& w, const Buffer& x, const Buffer& y, MulPush push, int64_t rows,
               MulPath path, const Buffer* y1, const Buffer* y2) {
  const Buffer& out1 = y1 != nullptr ? *y1 : y;
  const Buffer& out2 = y2 != nullptr ? *y2 : out1;
  constexpr int64_t kMaxGroups = 65535;
  const int64_t nt = push.nt;
  const bool tiles = path == MulPath::kTiles || (path == MulPath::kAuto && nt > kMulTokens);
  if (!tiles) {
    for (int64_t first = 0; first < rows; first += kMaxGroups) {
      MulPush p = push;
      p.row_base = push.row_base + static_cast<uint32_t>(first);
      p.rows = static_cast<uint32_t>(std::min(kMaxGroups, rows - first));
      s.Dispatch(mul, {&w, &x, &y, &out1, &out2}, p, p.rows, static_cast<uint32_t>((nt + kMulTokens - 1) / kMulTokens));
    }
    return;
  }
  const Kernel tiled =
      static_cast<Kernel>(static_cast<int>(Kernel::kMulTilesF32) + static_cast<int>(mul) - static_cast<int>(Kernel::kMulF32));
  const int64_t slice = kMaxGroups * kMulTileRows;
  for (int64_t first = 0; first < rows; first += slice) {
    MulPush p = push;
    p.row_base = push.row_base + static_cast<uint32_t>(first);
    p.rows = static_cast<uint32_t>(std::min(slice, rows - first));
    s.Dispatch(tiled, {&w, &x, &y, &out1, &out2}, p, (p.rows + kMulTileRows - 1) / kMulTileRows,
               static_cast<uint32_t>((nt + kMulTileTokens - 1) / kMulTileTokens));
  }
}

Result<double> MeasureReadBandwidth(Device& device) {
  const uint64_t bytes = std::min<uint64_t>(device.info().max_binding_bytes, uint64_t{1} << 30) & ~uint64_t{15};
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> src, device.NewBuffer(bytes, false, "the bandwidth probe"));
  constexpr uint32_t kGroups = 4096, kThreads = 256;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> sums, device.NewBuffer(kGroups * kThreads * sizeof(float), false,
                                                                         "the bandwidth probe"));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, device.NewStream());
  const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(bytes / 16, UINT32_MAX));
  double best = 0;
  // The first pass builds the pipeline and warms the memory; each later one reads the buffer
  // `reps` times in one submission.
  constexpr int kReps = 4;
  for (int pass = 0; pass < 4; ++pass) {
    TANDEM_RETURN_IF_ERROR(stream->Begin());
    for (int r = 0; r < kReps; ++r) stream->Dispatch(Kernel::kRead, {src.get(), sums.get()}, n, kGroups);
    const auto t0 = std::chrono::steady_clock::now();
    TANDEM_RETURN_IF_ERROR(stream->Submit());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0 && s > 0) best = std::max(best, kReps * static_cast<double>(n) * 16 / s / 1e9);
  }
  return best;
}

}  // namespace tandem::gpu
