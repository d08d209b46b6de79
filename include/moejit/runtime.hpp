#pragma once
// The embeddable runtime (DESIGN §6): prepare a layer once, then call forward per step.
//
// Threading: a Runtime may be shared by threads. prepare calls run one at a time (an internal lock).
// Loading a kernel (prepare, prewarm, or forward's first use of it) compiles and loads outside the
// module registry's lock, which forward takes briefly to look up a loaded kernel; threads asking for
// one kernel at once wait for one load. forward does not allocate, never synchronizes the host and is
// capturable into a CUDA graph once the kernels it needs are loaded.
//
// Compiling: a kernel not yet in the on-disk cache is compiled where it is first needed. prepare needs
// the architecture's weight-repack kernel; prewarm compiles (or loads) every kernel forward may use;
// without prewarm the first eager forward at a given M does. forward during stream capture with a
// missing kernel throws instead of compiling. A server that must never compile fills the cache with
// `moejit prewarm` (which includes the repack kernel) and runs with MOEJIT_NO_JIT=1.
//
// Contexts: the constructor makes the device's primary context current on the constructing thread, so
// that DeviceBuffers, streams and events the thread creates next belong to the device. prepare, prewarm, forward and the
// destructor make it current for their own duration and give the calling thread back whatever context
// it had, so an embedding thread that drives another device is left as it was.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moejit/host_layer.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/planner.hpp"

namespace moejit {

using DevicePtr = uint64_t;  // a CUdeviceptr
using StreamHandle = void*;  // a CUstream (nullptr: the legacy default stream)

struct RuntimeOptions {
  int device = 0;        // CUDA device ordinal (0 <= device < device count)
  CacheOptions cache;    // where cubins live, and whether a miss may compile (CacheOptions::no_jit)
  // The planner's overrides for every plan of this Runtime (prewarm's and forward's). Unset: read from the
  // environment (MOEJIT_DECODE_*, MOEJIT_BATCH_TILE_*) once, by the constructor, which throws
  // moejit::Error for a malformed one. Later environment changes do not change the plans.
  std::optional<TuningOverrides> tuning;
};

// Logical weights (DESIGN §3 layout) already in device memory; tensors the spec does not use must be 0.
// Each pointer holds exactly the tensor of HostLayer's field of the same name (bytes of packed FP4 and
// scale codes, f32 global scales [E] and biases), in the device of the Runtime that prepares it.
// w13_global_scale is [E], one FC1 global scale per expert, or, with w13_global_scale_gate_up (gated
// layers), [E, 2]: a gate and an up scale per expert (checkpoints that scale the two apart).
struct DeviceLayerView {
  LayerSpec spec;
  DevicePtr w13 = 0, w13_scale = 0, w13_global_scale = 0, w13_bias = 0;
  DevicePtr w2 = 0, w2_scale = 0, w2_global_scale = 0, w2_bias = 0;
  bool w13_global_scale_gate_up = false;  // w13_global_scale is [E, 2] (gate, up) rather than [E]
  // a4 layers (spec.precision): the f32 global input scales of x and of the intermediate (HostLayer's
  // a1_gs, a2_gs), each [a_gs_count] with a_gs_count 1 (every expert) or E; 0 for a16 and a8.
  DevicePtr a1_gs = 0, a2_gs = 0;
  int a_gs_count = 0;
};

struct ForwardArgs {
  DevicePtr x = 0;             // [M, H] bf16, row-major
  DevicePtr topk_ids = 0;      // [M, K] int32 global expert ids
  DevicePtr topk_weights = 0;  // [M, K] float32
  DevicePtr out = 0;           // [M, H] bf16, fully written
  int tokens = 0;              // M >= 0 (0 is a no-op)
  DevicePtr workspace = 0;     // caller-owned, workspace_size(layer, max_tokens) bytes, 256-byte aligned;
                               // contents need not be initialized; one forward at a time may use it
  size_t workspace_bytes = 0;  // its size; forward refuses one smaller than workspace_size(layer, tokens)
  // Every launch goes to this stream, in order; forward returns once they are enqueued. Inputs must
  // stay valid and out must not be read until the stream's work completes (the caller synchronizes).
  StreamHandle stream = nullptr;
  // Sizes of the buffers above in bytes, 0 where the caller does not say. Raw device pointers carry no
  // size, so only a given size lets forward refuse a buffer too small for M tokens (out is written, the
  // others read, in full) instead of touching memory past it.
  size_t x_bytes = 0, topk_ids_bytes = 0, topk_weights_bytes = 0, out_bytes = 0;
  // Runtime activation parameters; unset: the layer's values (LayerSpec::swiglu_alpha/beta/limit).
  // Set values must be finite, and the limit > 0. swiglu_alpha/beta apply to swigluoai layers only, and
  // a limit only to a layer prepared with one (a layer without a limit has kernels without a clamp);
  // setting a parameter the layer's kernels do not read is an error, not silently ignored.
  std::optional<float> swiglu_alpha, swiglu_beta, limit;
  Family force = Family::automatic;  // force a family (fails loudly if it cannot serve M)
};

// How prepare(HostLayer) lays out the scale planes the kernels read (docs/CSF.md §6, §8).
enum class ScaleReads {
  // A plane the HostLayer holds in CSF is read as CSF by the decode family when its prepared CSF form takes
  // fewer bytes than the plain prepared plane; other planes plainly. The layer keeps the plain prepared
  // planes too, which the batch and prefill families read (their loops are bound by instructions, not by
  // scale bytes, and rebuilding CSF scales there costs time: docs/DECISIONS.md, "Compressed scale format").
  automatic,
  // As automatic, but every family reads those planes as CSF and an a16 layer keeps no plain copy: the
  // least device memory, for slower batch and prefill steps.
  compact,
  plain,  // every plane plainly (CSF planes are expanded on the host)
  csf,    // every plane as CSF in every family, also a plain-held or incompressible one (tests, benches)
};
struct PrepareOptions {
  ScaleReads scales = ScaleReads::automatic;
};

// Scale bytes of a prepared layer per plane: the plain prepared plane (its size, also where the layer
// holds only the CSF form), and its prepared CSF form where the kernels read that (0 otherwise).
struct PreparedScaleBytes {
  size_t fc1_plain = 0, fc1_csf = 0, fc2_plain = 0, fc2_csf = 0;
};

// A layer repacked into the kernels' layout on the device. Owns its device memory (freed when the last
// shared_ptr goes; the Runtime that made it must outlive it). Immutable after prepare: any number of
// threads may run forward on one PreparedLayer at once, each with its own workspace and output.
class PreparedLayer {
 public:
  virtual ~PreparedLayer() = default;
  virtual const LayerSpec& spec() const = 0;     // the local layer it was prepared from
  virtual size_t device_bytes() const = 0;       // device memory it holds, in bytes
  // Which scale planes the decode family's kernels read in CSF (the kernel keys' csf_scales): bit 1 FC1's,
  // 2 FC2's. The a8/a4 kernels read plain planes, which a8/a4 layers keep beside the CSF ones.
  virtual int csf_scales() const = 0;
  // The same for the batch and prefill families: csf_scales() where the layer was prepared with
  // ScaleReads::compact or csf (an a16 layer then holds only the CSF form of those planes), else 0 (they
  // read the plain planes, which the layer keeps).
  virtual int batched_csf_scales() const = 0;
  virtual PreparedScaleBytes scale_bytes() const = 0;
};

class Runtime {
 public:
  // Loads the driver, retains the device's primary context and makes it current on the calling thread.
  // Reads MOEJIT_NO_JIT and the cache root (CacheOptions) now. Throws moejit::Error when no driver or
  // device is present, or the device's compute capability is not one moejit builds for.
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Validates shapes (DESIGN §3) and repacks on the GPU (compiling the repack kernel on a cache miss).
  // Throws moejit::Error naming the tensor, also for a tensor the spec does not use (a bias without
  // spec.has_bias, a global scale for mxfp4, an [E, 2] FC1 global scale for relu2). The host
  // overload copies the tensors to the device and repacks on the legacy default stream; the device
  // overload repacks from `stream` (the view's memory must stay valid until prepare returns). Both
  // synchronize before returning and allocate the prepared layer's device memory.
  std::shared_ptr<PreparedLayer> prepare(const HostLayer& layer);
  // As above; options.scales decides which planes the kernels read as CSF (built on the host from the
  // layer's scales, CSF or plain). An a16 layer then keeps only the CSF form of such a plane; an a8/a4
  // layer keeps the plain prepared plane beside it for its kernels (docs/CSF.md §6).
  std::shared_ptr<PreparedLayer> prepare(const HostLayer& layer, const PrepareOptions& options);
  std::shared_ptr<PreparedLayer> prepare(const DeviceLayerView& layer, StreamHandle stream = nullptr);

  // Workspace bytes forward needs for up to max_tokens tokens (1 <= max_tokens <= kMaxTokens, else
  // moejit::Error). Pure host arithmetic; thread-safe.
  size_t workspace_size(const PreparedLayer& layer, int max_tokens) const;
  // Compiles (or loads) and module-loads every kernel forward may use for 1..max_tokens tokens, and the
  // architecture's repack kernel (as `moejit prewarm` does); with force, only that family's kernels.
  // Throws moejit::Error for max_tokens outside [1, kMaxTokens], a compile failure, or a cache miss
  // under MOEJIT_NO_JIT. Synchronous; launches nothing.
  void prewarm(const PreparedLayer& layer, int max_tokens, Family force = Family::automatic);
  // Runs one layer: out[M, H] = the MoE layer of DESIGN §1 on x, topk_ids, topk_weights. Enqueues its
  // launches on args.stream and returns without waiting (no host synchronization, no allocation), so it
  // may be captured into a CUDA graph once its kernels are loaded (prewarm); out is then written by
  // each replay. Thread-safe: threads may call forward concurrently, each with its own workspace and
  // stream. Throws moejit::Error on bad arguments (naming them) before launching anything; the
  // activation overrides are checked even when tokens is 0, and a layer prepared by a Runtime of another
  // device (its weights are that device's memory) is refused. During stream capture a kernel that is
  // not loaded yet throws instead of compiling; a launch failure throws with the driver's message.
  void forward(const PreparedLayer& layer, const ForwardArgs& args);

  // The kernels forward would launch for `tokens` tokens on this device (make_plan with its SM count and
  // tuning()); throws moejit::Error when a forced family cannot serve that many. Pure host code;
  // thread-safe.
  Plan plan(const PreparedLayer& layer, int tokens, Family force = Family::automatic) const;
  // The planner overrides this Runtime was constructed with (RuntimeOptions::tuning); fixed for its life.
  const TuningOverrides& tuning() const;
  int device() const;               // the CUDA ordinal
  int sm_count() const;             // multiprocessors of the device
  Arch arch() const;                // the architecture kernels are built for (sm_90a on H100/H200)
  std::string device_name() const;  // e.g. "NVIDIA H200"
  KernelCache& cache();             // the cubin cache this runtime loads from (thread-safe)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Plain device memory for tools and tests (owning, move-only). Allocates in the calling thread's
// current context (the one a Runtime's constructor made current), or in device 0's primary context,
// made current, when the thread has none. Copies, fills and the free run in that same context,
// whatever the calling thread has current at the time, and leave the thread's context as it was.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` bytes (at least 1) of device memory, uninitialized; throws moejit::Error when the driver
  // cannot (no GPU, out of memory).
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const { return ptr_; }
  size_t size() const { return bytes_; }
  // Synchronous copies of `bytes` bytes between host memory and [offset, offset + bytes) of the buffer
  // (legacy default stream semantics: they wait for earlier work on it). Throw moejit::Error when the
  // range does not fit the buffer or the driver fails.
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  void fill_bytes(uint8_t value);  // synchronous memset of the whole buffer

  template <class T>
  static DeviceBuffer from(const std::vector<T>& v) {
    DeviceBuffer b(v.empty() ? 1 : v.size() * sizeof(T));
    if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> to_vector(size_t count) const {
    std::vector<T> v(count);
    if (count) download(v.data(), count * sizeof(T));
    return v;
  }

 private:
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
  void* ctx_ = nullptr;  // the CUcontext ptr_ was allocated in
};

// True when libcuda.so.1 loads and at least one device is present (never throws). When false and why
// is given, *why says what is missing. Thread-safe.
bool gpu_available(std::string* why = nullptr);

// What the driver reports about one device, read without creating or touching a context (a tool can
// ask this before deciding whether the device is one moejit runs on).
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;     // cuDriverGetVersion: 1000 * major + 10 * minor
  std::optional<Arch> arch;   // empty when moejit does not build for this compute capability
};
// Throws moejit::Error when the driver does not load or the device does not exist. Thread-safe.
DeviceInfo query_device(int device = 0);
// The architecture moejit builds for a compute capability, if any (9.0 sm_90a, 10.0 sm_100a, 12.0 sm_120a).
// Pure.
std::optional<Arch> arch_for_capability(int major, int minor);

}  // namespace moejit
