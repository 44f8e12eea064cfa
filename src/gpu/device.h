// gpu: Vulkan compute devices, the buffers on them, and streams of recorded dispatches of
// tandem's shaders (GLSL in gpu/shaders, compiled to SPIR-V at build time and embedded).
//
// A Device is one opened GPU: its queue, its memory, and the compute pipelines of the shaders,
// built the first time each is used (a shader the driver cannot build is an error of the stream
// that used it, naming the device and the shader). A Stream records dispatches into one command
// buffer, every dispatch followed by a barrier, and Submit runs them and waits.
//
// Only what MoltenVK offers is used (docs/architecture.md lists it): Vulkan 1.2, 8- and 16-bit
// storage buffers, push descriptors, no 64-bit atomics. Buffers are bound whole: none is larger
// than the device's maxStorageBufferRange (DeviceInfo::max_binding_bytes), so callers split
// larger data (weights by rows) across several.
//
// Errors are values: no loader, no driver, out of device memory, a lost device, a shader that
// fails to build all come back as Status naming the device and what failed.
//
// Thread safety: ListDevices and Open may be called from any thread. A Device may be shared by
// several streams on different threads (submissions to its queue are serialised); one Stream and
// one Buffer are used by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "quant/quant.h"

namespace tandem::gpu {

struct DeviceInfo {
  int index = 0;            // Vulkan<index>
  std::string name;         // "Vulkan0"
  std::string description;  // the driver's device name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"
  bool software = false;    // a driver that computes on the CPU (lavapipe): never chosen by default
  uint64_t memory_bytes = 0;        // the largest device-local heap
  uint64_t max_binding_bytes = 0;   // maxStorageBufferRange
  uint32_t subgroup_size = 0;
  double timestamp_ns = 0;  // nanoseconds per timestamp tick (0: its compute queue has no timestamps)
  // Empty when tandem can use the device, else what it lacks ("no 8-bit storage buffers").
  std::string unusable;
};

// Every Vulkan device of this machine, in the loader's order. Unavailable (saying why) when there
// is no Vulkan loader or driver.
Result<std::vector<DeviceInfo>> ListDevices();

// The device a --device value names: "CPU" (or "none"): no device; "Vulkan<i>": that one (an
// error when it cannot be opened); "" or "auto": the first usable GPU that is not a software
// driver, else none. `note` says in one line why the CPU runs when auto found no GPU.
struct DeviceChoice {
  std::shared_ptr<class Device> device;  // null: the CPU
  std::string note;
};
Result<DeviceChoice> ChooseDevice(const std::string& name);

// The shaders (one pipeline each).
enum class Kernel : int {
  kMulF32, kMulF16, kMulBF16, kMulQ4_0, kMulQ4_1, kMulQ5_0, kMulQ5_1, kMulQ8_0,
  kMulQ2_K, kMulQ3_K, kMulQ4_K, kMulQ5_K, kMulQ6_K,
  kRmsNorm, kAdd, kActMul,
  // Queries and keys rotated, keys and values stored in the cache: K type, V type.
  kRopeStoreF16F16, kRopeStoreF16Q8, kRopeStoreQ8F16, kRopeStoreQ8Q8,
  kAttnF16F16, kAttnF16Q8, kAttnQ8F16, kAttnQ8Q8,  // K type, V type
  kGather, kSoftcap,
  // Mixture of experts: products with each (token, choice) pair's own expert, routing, combining.
  kMulIdF32, kMulIdF16, kMulIdBF16, kMulIdQ4_0, kMulIdQ4_1, kMulIdQ5_0, kMulIdQ5_1, kMulIdQ8_0,
  kMulIdQ2_K, kMulIdQ3_K, kMulIdQ4_K, kMulIdQ5_K, kMulIdQ6_K, kMoeRoute, kMoeCombine,
  kRead,  // reads a buffer: MeasureReadBandwidth
  kActRoundQ8_0, kActRoundQ8_K,  // activations rounded as the CPU quantizes them for its products
  kGatedAdd,  // qwen2moe's shared expert
  // The tiled products (mul_tiles.comp) for prompts and batches, in the order of the kMul* kernels.
  kMulTilesF32, kMulTilesF16, kMulTilesBF16, kMulTilesQ4_0, kMulTilesQ4_1, kMulTilesQ5_0, kMulTilesQ5_1,
  kMulTilesQ8_0, kMulTilesQ2_K, kMulTilesQ3_K, kMulTilesQ4_K, kMulTilesQ5_K, kMulTilesQ6_K,
  // RMSNorm and the gated activation also writing their output rounded as kActRound* would (one
  // dispatch fewer before a product).
  kRmsNormQ8_0, kRmsNormQ8_K, kActMulQ8_0, kActMulQ8_K,
  kCount
};
const char* KernelName(Kernel k);
// The product shader of a weight type (`expert`: its MUL_ID variant); nullopt for a type without one.
std::optional<Kernel> MulKernelFor(quant::TensorType type, bool expert = false);

class Device;

// Memory on a device: device-local (fast for shaders), or host-visible and mapped (for transfers).
class Buffer {
 public:
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint64_t size() const { return size_; }
  // The mapping of a host-visible buffer (nullptr for a device-local one).
  void* mapped() const { return mapped_; }

 private:
  friend class Device;
  friend class Stream;
  Buffer();
  Device* device_ = nullptr;
  uint64_t size_ = 0;
  void* mapped_ = nullptr;
  struct Handles;
  std::unique_ptr<Handles> h_;
};

// A command buffer of one user. Record with Dispatch and Copy, then Submit.
class Stream {
 public:
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Starts recording (dropping anything recorded and not submitted).
  Status Begin();
  // Runs `k` over groups (gx, gy, gz) with `buffers` at bindings 0, 1, ... and `push` (at most 64
  // bytes) as its push constants; later commands see its writes.
  void Dispatch(Kernel k, std::initializer_list<const Buffer*> buffers, const void* push, uint32_t push_bytes,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1);
  template <typename P>
  void Dispatch(Kernel k, std::initializer_list<const Buffer*> buffers, const P& push, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1) {
    Dispatch(k, buffers, &push, sizeof(P), gx, gy, gz);
  }
  // Copies bytes between buffers; later commands see them.
  void Copy(const Buffer& src, uint64_t src_offset, const Buffer& dst, uint64_t dst_offset, uint64_t bytes);
  // Runs what was recorded and waits for it. The first error of the recording (a pipeline that
  // did not build) or of the run (a lost device) comes back here.
  Status Submit();
  // Runs the last submitted recording again, as it is (the buffers it names must still exist;
  // their contents may have changed: that is the point), and waits. Internal when nothing was
  // recorded since the last Begin or the last recording failed.
  Status Replay();

 private:
  friend class Device;
  explicit Stream(Device* d);
  Device* device_;
  Status error_;
  struct Handles;
  std::unique_ptr<Handles> h_;
  void Timestamp(int label);
};

class Device {
 public:
  // Opens Vulkan<index>. InvalidArgument when there is no such device, Unsupported when it lacks
  // what tandem needs (DeviceInfo::unusable), Unavailable without Vulkan.
  static Result<std::unique_ptr<Device>> Open(int index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }

  // `bytes` (> 0, at most info().max_binding_bytes) of device-local or host-visible memory.
  // ResourceExhausted naming the device and `what` when it does not fit.
  Result<std::unique_ptr<Buffer>> NewBuffer(uint64_t bytes, bool host_visible, const std::string& what);
  // Copies host bytes into a buffer (through a staging buffer for a device-local one) and waits.
  Status Upload(Buffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  // Copies a buffer's bytes to the host and waits.
  Status Download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes);
  Result<std::unique_ptr<Stream>> NewStream();

  // Bytes of device memory this Device has allocated now.
  uint64_t allocated_bytes() const { return allocated_.load(std::memory_order_relaxed); }

  // Whether the driver has answered VK_ERROR_DEVICE_LOST: nothing can run on this Device again
  // (every later submission fails at once, saying so); Open the device anew to go on.
  bool lost() const;

  // Profiling: where a step's GPU time goes, by shader. While on, every stream recorded from now
  // on writes a timestamp after each command, and each run of such a recording adds each
  // command's time to the profile. Unsupported when the compute queue has no timestamps.
  struct ProfileEntry {
    std::string name;  // the shader ("mul_q4_k"), or "copy"
    uint64_t calls = 0;
    double ms = 0;
  };
  Status StartProfile();
  // What ran since StartProfile, by shader, the longest first; profiling is off afterwards.
  std::vector<ProfileEntry> StopProfile();
  // Whether profiling is on: a recording made while it was not must be recorded anew to be
  // profiled (and the other way round).
  bool profiling() const;

  // For tests of the error paths only: from now on the driver answers as a failing one does.
  // kDeviceLost: every submission answers VK_ERROR_DEVICE_LOST (the device reset or fell off the
  // bus); kShaderBuild: every pipeline not built yet fails to build (a driver that cannot compile
  // a shader). Call while no other thread uses the Device.
  enum class Fault { kDeviceLost, kShaderBuild };
  void InjectFaultForTesting(Fault fault);

 private:
  friend class Buffer;
  friend class Stream;
  Device();
  // The pipeline of `k`, built on first use.
  Status Pipeline(Kernel k, void** pipeline, void** layout);
  Status Transfer(Buffer& host, const Buffer& device_buf, uint64_t offset, uint64_t bytes, bool to_device);

  DeviceInfo info_;
  std::atomic<uint64_t> allocated_{0};  // buffers are made and freed on several threads
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The push constants of the product shaders (gpu/shaders/dequant.glsl): y[t][y_offset + row_base
// + r] = row (row_base + r) of the weights times x[t], for nt tokens; with the MUL_ID kernels each
// (token, choice) pair v multiplies its expert ids[v]'s rows with x[v / x_div]. `rows` bounds the
// tiled kernels' rows (RecordMul sets it). With `accumulate` each product is added to what y
// holds there (y[..] += row . x[t], one addition: a residual) instead of replacing it. A stack
// of matrices in one buffer (split1 > 0; not the MUL_ID kernels): rows from split1 go to a second
// output, y1[t][r - split1], and from split2 to a third, y2[t][r - split2], both split_stride
// floats a token (split2 = all rows for a stack of two).
struct MulPush {
  uint32_t row_base = 0, cols = 0, nt = 0, x_stride = 0, y_stride = 0, y_offset = 0, row_bytes = 0;
  uint32_t expert_rows = 0, expert_first = 0, experts = 0, x_div = 1, rows = 0, accumulate = 0;
  uint32_t split1 = 0, split2 = 0, split_stride = 0;
};
static_assert(sizeof(MulPush) <= 64);
// Tokens per workgroup of the mul shaders (group y counts groups of them): the row kernels
// (mul.comp) take up to this many tokens, RecordMul the tiled ones for more.
inline constexpr uint32_t kMulTokens = 8;
// Rows and tokens per workgroup of the tiled kernels (mul_tiles.comp).
inline constexpr uint32_t kMulTileRows = 64, kMulTileTokens = 64;

// Which product kernel RecordMul records: by the number of tokens, or the one named (tests).
enum class MulPath { kAuto, kRows, kTiles };

// Records y = W x for `rows` rows of W from push.row_base and push.nt tokens, W's type given by
// `mul`, its row kernel (MulKernelFor, not an expert one): that kernel (one workgroup a row and
// kMulTokens tokens) for up to kMulTokens tokens, where one read of each weight serves them all;
// the tiled kernel of the same type for more, which dequantizes each weight once per
// kMulTileTokens tokens. At most 65535 groups per dispatch (larger matrices take several). y1 and
// y2: a stack's second and third outputs (push.split1), y1 when y2 is null.
void RecordMul(Stream& s, Kernel mul, const Buffer& w, const Buffer& x, const Buffer& y, MulPush push, int64_t rows,
               MulPath path = MulPath::kAuto, const Buffer* y1 = nullptr, const Buffer* y2 = nullptr);

// The device's read bandwidth in GB/s: the best of a few passes of the read shader over the
// largest buffer one binding holds (at most 1 GiB), timed on the host around each submission.
Result<double> MeasureReadBandwidth(Device& device);

}  // namespace tandem::gpu
