// The `cuda` backend plugin: the keel_backend_api table (ABI 0.8) over kernels/cuda, for one GPU.
// This file parses the config section, owns the device objects (one stream, the cuBLASLt handle
// and workspace, the caching allocator, pinned host blocks), checks arguments, and keeps C++
// exceptions from crossing the ABI (every slot runs under keel_support::guard); the math lives
// in the kernels. First run on an H200 (driver 580.159.04) on 2026-11-27: see docs/cuda.md.
//
// Loading needs no GPU: only libcudart and libcublasLt are linked, and libcudart opens the
// driver on first use, so probe and create can say "no CUDA device" instead of failing to load.
//
// Determinism: no op uses float atomics (cuDNN's attention backward too, unless the config sets
// "deterministic_attention": false), and every reduction adds in a fixed order, so each op
// gives the same bits on every run with the same GPU model, toolkit and shapes. The one caveat
// is cuBLASLt, which picks its algorithm by heuristic per shape and device: reproducible run to
// run on one GPU model (cuBLAS's documented guarantee), not bit-identical across GPU models.
// Token ids and targets live in device memory, so unlike the cpu backend this one cannot check
// them on the host: a negative token id reads a zero row, while ids past the table's end (which
// no argument bounds) and targets >= V are the data loader's to prevent.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <keel/backend.h>
#include <keel/plugin.h>
#include <keel_support/common/launcher_env.hpp>
#include <keel_support/common/plugin_entry.hpp>
#include <keel_support/backend/backend_slots.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "caching_allocator.hpp"  // defines: CachingAllocator
#include "cuda/attention_cudnn_shape.hpp"  // defines: AttentionShape, cudnn_attention_refusal
#ifdef KEEL_HAVE_CUDNN_ATTENTION
#include "cuda/attention_cudnn.h"  // defines: CudnnAttention, cudnn_library
#endif
#include "cuda/kernels.h"         // defines: every kernel launcher, Elem
#include "cuda/matmul.h"          // defines: Matmul, matmul_forward, matmul_backward
#include "keel_support/common/abi_guard.hpp"
#include "backend_cuda.hpp"  // defines: CudaBackend, Settings, run, require, elem_of
#include "op_profile.hpp"  // defines: OpProfile

namespace {

using namespace keel_cuda;  // the shared pieces: backend_cuda.hpp
using keel::cuda::Elem;
using keel_support::StatusError;


Settings parse_settings(const char* config_json, const char* json_path) {
  auto section = keel_support::JsonSection::parse(config_json, json_path ? json_path : "backend");
  section.allow("plugin");
  Settings s;
  s.device_given = section.has("device");
  s.device = section.get_in_range<int>("device", 0, 0, 1023);
  s.compute = section.get_choice("precision", "fp32", {"fp32", "bf16"}) == "bf16" ? Elem::bf16 : Elem::f32;
  s.allow_tf32 = section.get<bool>("allow_tf32", false);
  s.peak_tflops = section.get_in_range<double>("peak_tflops", 0.0, 0.0, 1e6);
  s.op_profile = section.get<bool>("op_profile", false);
  s.attention = section.get_choice("attention", "auto", {"auto", "cudnn", "kernels"});
  s.gelu_epilogue = section.get<bool>("gelu_epilogue", true);
  s.deterministic_attention = section.get<bool>("deterministic_attention", true);
  section.finish();
  if (s.attention == "cudnn" && s.compute == Elem::f32)
    throw StatusError(KEEL_ERR_INVALID_CONFIG, std::string(json_path ? json_path : "backend") +
                                                   ".attention: \"cudnn\" needs \"precision\": \"bf16\" (cuDNN's "
                                                   "fused attention computes in bf16; fp32 runs Keel's kernels)");
  return s;
}


// "CUDA driver version is insufficient" is also what the runtime says when there is no driver
// at all; the versions tell the two apart.
std::string driver_hint() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  if (driver == 0) return " (no NVIDIA driver is installed: libcuda.so.1 was not found)";
  return " (the NVIDIA driver supports CUDA " + version(driver) + "; this build of the plugin uses CUDA " +
         version(runtime) + ")";
}

// The probe: a device the runtime can see, or why not (no driver, no GPU, a driver too old).
int count_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string("no CUDA device: cudaGetDeviceCount: ") +
                                              cudaGetErrorName(status) + ": " + cudaGetErrorString(status) +
                                              driver_hint());
  }
  if (count == 0) throw StatusError(KEEL_ERR_NOT_FOUND, "no CUDA device: cudaGetDeviceCount found 0 devices");
  return count;
}

// The GPU this process takes: "device" when the config gives one; else, when a launcher (mpirun,
// srun) started several processes per node, its local rank modulo the GPUs this process sees, so
// each process on a node takes its own GPU (or, where the launcher already confined each to one
// with CUDA_VISIBLE_DEVICES, the one it sees); else 0. `why` says which.
int chosen_device(const Settings& s, int count, std::string* why) {
  if (s.device_given) {
    *why = "configured";
    return s.device;
  }
  const std::optional<keel_support::LauncherIdentity> launcher = keel_support::launcher_identity();
  if (!launcher || launcher->local_rank < 0) {
    *why = "the default";
    return 0;
  }
  *why = launcher->launcher + "'s local rank " + std::to_string(launcher->local_rank) + " of " +
         std::to_string(count) + " visible";
  return launcher->local_rank % count;
}

// The MFU denominator, from the device's SM count and peak clock times the per-SM, per-clock
// rate of the arithmetic the matmuls run at: dense bf16 tensor cores under "precision": "bf16",
// TF32 tensor cores (half that) for fp32 with "allow_tf32", else fp32 FMA units. The per-SM
// rates are NVIDIA's published figures: sm_80 (A100) 2048 bf16 FLOP/clock, 64 fp32 FMA; sm_9x
// (H100/H200) 4096 and 128; sm_10x 8192 and 128; other sm_8x 1024 and 128.
double estimated_peak_flops(int device, const cudaDeviceProp& prop, const Settings& s, std::string* how) {
  int clock_khz = 0;
  check_cuda(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device), "cudaDeviceGetAttribute(ClockRate)");
  double tensor = 1024, fma = 128;
  if (prop.major == 8 && prop.minor == 0) tensor = 2048, fma = 64;
  if (prop.major == 9) tensor = 4096;
  if (prop.major == 10) tensor = 8192;
  double per_sm_clock = 2 * fma;
  *how = "fp32 FMA units";
  if (s.compute == Elem::bf16) {
    per_sm_clock = tensor;
    *how = "bf16 tensor cores";
  } else if (s.allow_tf32) {
    per_sm_clock = tensor / 2;
    *how = "TF32 tensor cores";
  }
  return per_sm_clock * prop.multiProcessorCount * clock_khz * 1e3;
}


// --- lifetime and configuration ---

keel_status validate_config(const keel_host* host, const char* config_json, const char* json_path) {
  return keel_support::guard(host, kSource, [&] { parse_settings(config_json, json_path); });
}

keel_status probe(const keel_host* host) {
  return keel_support::guard(host, kSource, [] { count_devices(); });
}

// What `keel plugins` and the start-up log say of attention: cuDNN's, and which, or why not.
std::string attention_summary() {
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  const keel::cuda::CudnnLibrary& lib = keel::cuda::cudnn_library();
  if (lib.usable)
    return "cuDNN fused flash attention for bf16 at head sizes in multiples of 8 up to 256 (" + lib.text +
           "), Keel's kernels otherwise";
  return "Keel's kernels (no cuDNN: " + lib.text + ")";
#else
  return "Keel's kernels (built without cuDNN attention: scripts/fetch-cudnn-frontend.sh, then rebuild)";
#endif
}

void open_attention(CudaBackend& b, const std::string& path) {
  if (b.settings.attention == "kernels") {
    b.cudnn_absent = path + ".attention is \"kernels\"";
    keel_logf(b.host, KEEL_LOG_INFO, kSource, "attention: Keel's kernels (%s)", b.cudnn_absent.c_str());
    return;
  }
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  b.cudnn = keel::cuda::CudnnAttention::open(b.settings.deterministic_attention, total_bytes / 4, &b.cudnn_absent);
#else
  b.cudnn_absent = "this build has no cuDNN attention (scripts/fetch-cudnn-frontend.sh, then rebuild)";
#endif
  if (b.cudnn_absent.empty()) {
    keel_logf(b.host, KEEL_LOG_INFO, kSource, "attention: %s%s", attention_summary().c_str(),
              b.settings.deterministic_attention ? "" : "; its backward not deterministic (\"deterministic_attention\": false)");
    return;
  }
  if (b.settings.attention == "cudnn")
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, path + ".attention is \"cudnn\", but " + b.cudnn_absent);
  keel_logf(b.host, KEEL_LOG_INFO, kSource, "attention: Keel's kernels (cuDNN not used: %s)", b.cudnn_absent.c_str());
}

keel_status create(const keel_host* host, const keel_backend_create_args* args, void** out_backend) {
  return keel_support::guard(host, kSource, [&] {
    require(host != nullptr && args != nullptr && out_backend != nullptr, "create: NULL argument");
    const char* path = args->json_path ? args->json_path : "backend";
    Settings s = parse_settings(args->config_json, path);
    const int count = count_devices();
    if (s.device >= count)
      throw StatusError(KEEL_ERR_INVALID_CONFIG, std::string(path) + ".device: " + std::to_string(s.device) +
                                                     " is not a CUDA device of this machine (it has " +
                                                     std::to_string(count) + ": 0 to " + std::to_string(count - 1) +
                                                     ")");
    std::string device_why;
    s.device = chosen_device(s, count, &device_why);
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, s.device), "cudaGetDeviceProperties");
    if (prop.major < 8)
      throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(path) + ".device: " + prop.name +
                                                    " has compute capability " + std::to_string(prop.major) + "." +
                                                    std::to_string(prop.minor) +
                                                    "; the cuda backend is built for 8.0 (A100) and newer");
    auto b = std::make_unique<CudaBackend>();
    b->host = host;
    b->device = s.device;
    b->settings = s;
    check_cuda(cudaSetDevice(s.device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const cublasStatus_t lt = cublasLtCreate(&b->cublaslt);
    if (lt != CUBLAS_STATUS_SUCCESS)
      throw StatusError(KEEL_ERR_INTERNAL, std::string("cublasLtCreate: ") + cublasLtGetStatusString(lt));
    check_cuda(cudaMalloc(&b->matmul_workspace, kMatmulWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
    check_cuda(cudaMalloc(&b->reduce_scratch, (keel::cuda::kSumSquaresBlocks + 1) * sizeof(double)),
               "cudaMalloc (reduction scratch)");
    std::string how = "configured";
    if (s.op_profile) b->profile = std::make_unique<keel_cuda::OpProfile>(b->stream);
    b->peak_flops_per_s = s.peak_tflops > 0 ? s.peak_tflops * 1e12 : estimated_peak_flops(s.device, prop, s, &how);
    keel_logf(host, KEEL_LOG_INFO, kSource, "device %d (%s): %s (sm_%d%d, %d SMs, %zu MiB), %s%s, peak %.1f TFLOP/s (%s)",
              s.device, device_why.c_str(), prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 20,
              s.compute == Elem::bf16 ? "bf16" : "fp32", s.allow_tf32 ? " (TF32 matmuls allowed)" : "",
              b->peak_flops_per_s / 1e12, how.c_str());
    open_attention(*b, path);
    *out_backend = b.release();
  });
}

// Frees everything even when the device is in an error state (cudaSetDevice failing then).
void destroy(void* backend) {
  auto* b = static_cast<CudaBackend*>(backend);
  if (!b) return;
  keel_support::guard(b->host, kSource, [&] {
    cudaSetDevice(b->device);
    if (b->profile) {
      keel_logf(b->host, KEEL_LOG_INFO, kSource, "op profile (GPU time per slot, CUDA events on the stream):");
      for (const std::string& line : b->profile->table(b->peak_flops_per_s))
        keel_logf(b->host, KEEL_LOG_INFO, kSource, "%s", line.c_str());
    }
    delete b;
  });
}

keel_status device(void* backend, keel_device* out_device) {
  return run(backend, [&](CudaBackend& b) {
    require(out_device != nullptr, "device: out_device is NULL");
    *out_device = keel_device{KEEL_DEVICE_CUDA, b.device};
  });
}

keel_status peak_flops(void* backend, double* out_flops_per_s) {
  return run(backend, [&](CudaBackend& b) {
    require(out_flops_per_s != nullptr, "peak_flops: output is NULL");
    *out_flops_per_s = b.peak_flops_per_s;
  });
}

keel_status compute_dtype(void* backend, keel_dtype* out_dtype) {
  return run(backend, [&](CudaBackend& b) {
    require(out_dtype != nullptr, "compute_dtype: output is NULL");
    *out_dtype = dtype_of(b.settings.compute);
  });
}

keel_status queue(void* backend, void** out_queue) {
  return run(backend, [&](CudaBackend& b) {
    require(out_queue != nullptr, "queue: output is NULL");
    *out_queue = b.stream;
  });
}

// --- memory ---

keel_status alloc(void* backend, size_t bytes, void** out_ptr) {
  return run(backend, [&](CudaBackend& b) {
    require(out_ptr != nullptr, "alloc: out_ptr is NULL");
    void* ptr = b.allocator.allocate(bytes, b.stream);
    const cudaError_t zeroed = cudaMemsetAsync(ptr, 0, bytes, b.stream);
    if (zeroed != cudaSuccess) b.allocator.release(ptr);
    check_cuda(zeroed, "alloc: cudaMemsetAsync");
    *out_ptr = ptr;
  });
}

void free_memory(void* backend, void* ptr) {
  run(backend, [&](CudaBackend& b) { b.allocator.release(ptr); });
}

cudaMemcpyKind copy_kind(int32_t direction, const char* op) {
  switch (direction) {
    case KEEL_COPY_HOST_TO_DEVICE:
      return cudaMemcpyHostToDevice;
    case KEEL_COPY_DEVICE_TO_HOST:
      return cudaMemcpyDeviceToHost;
    case KEEL_COPY_DEVICE_TO_DEVICE:
      return cudaMemcpyDeviceToDevice;
  }
  throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(op) + ": unknown direction " + std::to_string(direction));
}

keel_status copy(void* backend, void* dst, const void* src, size_t bytes, int32_t direction) {
  return run(backend, [&](CudaBackend& b) {
    const cudaMemcpyKind kind = copy_kind(direction, "copy");
    require(bytes == 0 || (dst && src), "copy: NULL pointer");
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, b.stream), "copy: cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(b.stream), "copy: cudaStreamSynchronize");
  });
}

keel_status copy_async(void* backend, void* dst, const void* src, size_t bytes, int32_t direction) {
  return run(backend, [&](CudaBackend& b) {
    const cudaMemcpyKind kind = copy_kind(direction, "copy_async");
    require(bytes == 0 || (dst && src), "copy_async: NULL pointer");
    if (bytes) check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, b.stream), "copy_async: cudaMemcpyAsync");
  });
}

keel_status fill_zero(void* backend, void* ptr, size_t bytes) {
  return run(backend, [&](CudaBackend& b) {
    require(bytes == 0 || ptr, "fill_zero: NULL pointer");
    if (bytes) check_cuda(cudaMemsetAsync(ptr, 0, bytes, b.stream), "fill_zero: cudaMemsetAsync");
  });
}

keel_status synchronize(void* backend) {
  return run(backend, [&](CudaBackend& b) { check_cuda(cudaStreamSynchronize(b.stream), "synchronize"); });
}

keel_status alloc_host(void* backend, size_t bytes, void** out_ptr) {
  return run(backend, [&](CudaBackend& b) {
    require(out_ptr != nullptr, "alloc_host: out_ptr is NULL");
    void* ptr = nullptr;
    check_cuda(cudaMallocHost(&ptr, bytes ? bytes : 64),
               "alloc_host: cudaMallocHost of " + std::to_string(bytes) + " bytes");
    std::memset(ptr, 0, bytes);
    std::lock_guard<std::mutex> lock(b.host_mutex);
    b.host_blocks.insert(ptr);
    *out_ptr = ptr;
  });
}

void free_host(void* backend, void* ptr) {
  run(backend, [&](CudaBackend& b) {
    if (!ptr) return;
    {
      std::lock_guard<std::mutex> lock(b.host_mutex);
      require(b.host_blocks.erase(ptr) == 1, "free_host: pointer was not allocated by alloc_host");
    }
    check_cuda(cudaFreeHost(ptr), "free_host: cudaFreeHost");
  });
}

// --- events ---

keel_status event_create(void* backend, void** out_event) {
  return run(backend, [&](CudaBackend&) {
    require(out_event != nullptr, "event_create: out_event is NULL");
    cudaEvent_t event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event_create");
    *out_event = event;
  });
}

void event_destroy(void* backend, void* event) {
  run(backend, [&](CudaBackend&) {
    if (event) check_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "event_destroy");
  });
}

keel_status event_record(void* backend, void* event) {
  return run(backend, [&](CudaBackend& b) {
    require(event != nullptr, "event_record: event is NULL");
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event), b.stream), "event_record");
  });
}

keel_status event_wait(void* backend, void* event) {
  return run(backend, [&](CudaBackend& b) {
    require(event != nullptr, "event_wait: event is NULL");
    check_cuda(cudaStreamWaitEvent(b.stream, static_cast<cudaEvent_t>(event), 0), "event_wait");
  });
}

keel_status event_synchronize(void* backend, void* event) {
  return run(backend, [&](CudaBackend&) {
    require(event != nullptr, "event_synchronize: event is NULL");
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "event_synchronize");
  });
}

keel_status convert(void* backend, void* dst, keel_dtype dst_dtype, const void* src, keel_dtype src_dtype, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    require_sizes({n}, "convert");
    const Elem to = elem_of(dst_dtype, "convert"), from = elem_of(src_dtype, "convert");
    require(n == 0 || (dst && src), "convert: NULL pointer");
    keel::cuda::convert(to, dst, from, src, n, b.stream);
    launched("convert");
  });
}

// --- ops at an element type (0.8); the fp32 slots of 0.1 and 0.6 call these with fp32 ---

keel_status matmul_forward_dt(void* backend, keel_dtype dt, void* out, void* gelu_pre, const void* inp,
                              const void* weight, const void* bias, int64_t N, int64_t IC, int64_t OC) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "matmul_forward");
    require_sizes({N, IC, OC}, "matmul_forward");
    keel::cuda::matmul_forward(b.matmul(), e, out, gelu_pre, inp, weight, bias, N, IC, OC);
    launched("matmul_forward");
    count_flops(2.0 * N * IC * OC);
  });
}

keel_status matmul_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const void* weight, int64_t N, int64_t IC, int64_t OC) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "matmul_backward");
    require_sizes({N, IC, OC}, "matmul_backward");
    StreamScratch bias_scratch(
        b, dbias ? static_cast<size_t>(keel::cuda::column_sum_scratch_floats(N, OC)) * sizeof(float) : 0);
    keel::cuda::matmul_backward(b.matmul(), e, dinp, dweight, dbias, dout, inp, weight, N, IC, OC,
                                static_cast<float*>(bias_scratch.ptr));
    launched("matmul_backward");
    count_flops(2.0 * N * IC * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0)));
  });
}

keel_status layernorm_forward_dt(void* backend, keel_dtype dt, void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int64_t N, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "layernorm_forward");
    require_sizes({N, C}, "layernorm_forward");
    keel::cuda::layernorm_forward(e, out, mean, rstd, inp, weight, bias, N, C, b.stream);
    launched("layernorm_forward");
  });
}

keel_status layernorm_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, float* dbias,
                                  const void* dout, const void* inp, const void* weight, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "layernorm_backward");
    require_sizes({N, C}, "layernorm_backward");
    // The parameter gradients' per-chunk sums go to scratch, handed back at once: the stream
    // orders its next user after these kernels.
    const int64_t floats = dweight || dbias ? keel::cuda::layernorm_backward_scratch_floats(N, C) : 0;
    void* scratch = floats > 0 ? b.allocator.allocate(static_cast<size_t>(floats) * sizeof(float), b.stream) : nullptr;
    keel::cuda::layernorm_backward(e, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                   static_cast<float*>(scratch), b.stream);
    const cudaError_t status = cudaGetLastError();
    if (scratch) b.allocator.release(scratch);
    check_cuda(status, "layernorm_backward: kernel launch");
  });
}

// The flash-style kernels keep a head size of at most kAttentionMaxHeadSize in registers and
// their tiles in 48 KiB of shared memory; the grid puts B·NH on x and T/8 on y.
// cuDNN takes head sizes up to kCudnnMaxHeadSize; which path a shape takes is attention_path's.
void require_attention_shape(int64_t B, int64_t T, int64_t C, int64_t NH, const char* op,
                             int64_t max_head_size = keel::cuda::kAttentionMaxHeadSize) {
  require_sizes({B, T, C}, op);
  require(NH > 0 && C % NH == 0, std::string(op) + ": C = " + std::to_string(C) +
                                     " must be a positive multiple of NH = " + std::to_string(NH));
  const int64_t hs = C / NH;
  if (hs > max_head_size)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(op) + ": head size C/NH = " + std::to_string(hs) +
                                                  " exceeds the cuda backend's " + std::to_string(max_head_size));
  require(B * NH < (int64_t{1} << 31) && T <= int64_t{65535} * 8,
          std::string(op) + ": B·NH = " + std::to_string(B * NH) + " or T = " + std::to_string(T) +
              " is beyond the CUDA grid (B·NH < 2^31, T <= 524280)");
}

// Which kernels run one attention call. cuDNN where it takes the shape (its graphs built and
// cached on first sight) and every pointer is 16-byte aligned; Keel's own kernels otherwise, which
// keep their head-size limit. Both keep the same statistics in `saved` (the natural-log
// log-sum-exp of the scaled scores, (B, NH, T) fp32), so the forward and the backward of one
// layer may take different paths. Each shape's path is logged once.
bool use_cudnn(CudaBackend& b, Elem e, const keel::cuda::AttentionShape& s, const char* op,
               std::initializer_list<const void*> pointers = {}) {
  std::string why = b.cudnn_absent;
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  if (b.cudnn) {
    why = keel::cuda::cudnn_attention_refusal(e == Elem::bf16, s);
    if (why.empty()) b.cudnn->prepare(s, &why);
  }
#endif
  for (const void* p : pointers)
    if (why.empty() && reinterpret_cast<uintptr_t>(p) % 16 != 0) why = "a buffer is not 16-byte aligned";
  if (!why.empty() && b.settings.attention == "cudnn")
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(op) + ": backend.attention is \"cudnn\", but cuDNN " +
                                                  "does not take B " + std::to_string(s.B) + ", T " +
                                                  std::to_string(s.T) + ", " + std::to_string(s.NH) + " heads (" +
                                                  std::to_string(s.NKV) + " kv) of " + std::to_string(s.hs) + ": " + why);
  if (b.logged_shapes.insert(s).second)
    keel_logf(b.host, KEEL_LOG_INFO, kSource, "attention B %lld, T %lld, %lld heads (%lld kv) of %lld, %s: %s%s",
              static_cast<long long>(s.B), static_cast<long long>(s.T), static_cast<long long>(s.NH),
              static_cast<long long>(s.NKV), static_cast<long long>(s.hs), e == Elem::bf16 ? "bf16" : "fp32",
              why.empty() ? "cuDNN" : "Keel's kernels", why.empty() ? "" : (" (" + why + ")").c_str());
  if (why.empty()) return true;
  if (s.hs > keel::cuda::kAttentionMaxHeadSize)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, std::string(op) + ": head size " + std::to_string(s.hs) +
                                                  " exceeds Keel's own kernels' " +
                                                  std::to_string(keel::cuda::kAttentionMaxHeadSize) +
                                                  ", and cuDNN does not take it: " + why);
  return false;
}

keel::cuda::AttentionShape attention_shape(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  return keel::cuda::AttentionShape{B, T, NH, NKV, C / NH};
}

int64_t saved_bytes_on(CudaBackend& b, Elem e, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                       const char* op) {
  require_attention_shape(B, T, C, NH, op, keel::cuda::kCudnnMaxHeadSize);
  if (B > 0 && T > 0) use_cudnn(b, e, attention_shape(B, T, C, NH, NKV), op);
  // One log-sum-exp per (b, query head, t), rounded up to 16 bytes: models lay each layer's
  // statistics after the last's, and cuDNN takes only 16-byte-aligned buffers.
  return (B * NH * T * static_cast<int64_t>(sizeof(float)) + 15) / 16 * 16;
}

void attention_forward_on(CudaBackend& b, Elem e, void* out, float* saved, const void* qkv, int64_t B, int64_t T,
                          int64_t C, int64_t NH, int64_t NKV, const char* op) {
  require_attention_shape(B, T, C, NH, op, keel::cuda::kCudnnMaxHeadSize);
  count_flops(2.0 * B * T * T * C);  // causal QKᵀ and PV: half of 2 × 2BT²C
  if (B == 0 || T == 0 || C == 0) return;
  const keel::cuda::AttentionShape s = attention_shape(B, T, C, NH, NKV);
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  if (use_cudnn(b, e, s, op, {out, saved, qkv})) {
    StreamScratch workspace(b, b.cudnn->workspace_bytes(s, false));
    b.cudnn->forward(s, out, saved, qkv, workspace.ptr, b.stream);
    return;
  }
#else
  use_cudnn(b, e, s, op);
#endif
  keel::cuda::attention_forward(e, out, saved, qkv, B, T, C, NH, NKV, b.stream);
  launched(op);
}

// D = rowsum(dout ∘ out) goes to scratch from the caching allocator, handed back at once: the
// stream orders its next user after these kernels. cuDNN writes its gradient, which the ABI
// adds, so it goes to scratch first and is added on.
void attention_backward_on(CudaBackend& b, Elem e, void* dqkv, const void* dout, const void* qkv, const void* out,
                           const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                           const char* op) {
  require_attention_shape(B, T, C, NH, op, keel::cuda::kCudnnMaxHeadSize);
  count_flops(4.0 * B * T * T * C);  // causal: twice the forward's, the recomputed scores not counted
  if (B == 0 || T == 0 || C == 0) return;
  const keel::cuda::AttentionShape s = attention_shape(B, T, C, NH, NKV);
#ifdef KEEL_HAVE_CUDNN_ATTENTION
  if (use_cudnn(b, e, s, op, {dqkv, dout, qkv, out, lse})) {
    const int64_t n = B * T * s.row_width();
    StreamScratch gradient(b, static_cast<size_t>(n) * 2);
    StreamScratch workspace(b, b.cudnn->workspace_bytes(s, true));
    b.cudnn->backward(s, gradient.ptr, dout, qkv, out, lse, workspace.ptr, b.stream);
    keel::cuda::accumulate(e, dqkv, gradient.ptr, n, b.stream);
    launched(op);
    return;
  }
#else
  use_cudnn(b, e, s, op);
#endif
  StreamScratch rowdot(b, static_cast<size_t>(B * NH * T) * sizeof(float));
  keel::cuda::attention_backward(e, dqkv, dout, qkv, out, lse, static_cast<float*>(rowdot.ptr), B, T, C, NH, NKV,
                                 b.stream);
  launched(op);
}

int64_t attention_saved_bytes(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH) {
  int64_t bytes = -1;
  run(backend, [&](CudaBackend& b) {
    bytes = saved_bytes_on(b, elem_of(dt, "attention_saved_bytes"), B, T, C, NH, NH, "attention_saved_bytes");
  });
  return bytes;
}

keel_status attention_forward_dt(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) {
  return run(backend, [&](CudaBackend& b) {
    attention_forward_on(b, elem_of(dt, "attention_forward"), out, static_cast<float*>(saved), qkv, B, T, C, NH, NH,
                         "attention_forward");
  });
}

keel_status attention_backward_dt(void* backend, keel_dtype dt, void* dqkv, const void* dout, const void* qkv,
                                  const void* out, const void* saved, int64_t B, int64_t T, int64_t C, int64_t NH) {
  return run(backend, [&](CudaBackend& b) {
    attention_backward_on(b, elem_of(dt, "attention_backward"), dqkv, dout, qkv, out,
                          static_cast<const float*>(saved), B, T, C, NH, NH, "attention_backward");
  });
}

// --- 0.9: the Llama family's ops ---

keel_status rmsnorm_forward_dt(void* backend, keel_dtype dt, void* out, float* rstd, const void* inp,
                               const void* weight, int64_t N, int64_t C, float eps) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rmsnorm_forward");
    require_sizes({N, C}, "rmsnorm_forward");
    require(eps > 0.0f, "rmsnorm_forward: eps " + std::to_string(eps) + " must be positive");
    keel::cuda::rmsnorm_forward(e, out, rstd, inp, weight, N, C, eps, b.stream);
    launched("rmsnorm_forward");
  });
}

keel_status rmsnorm_backward_dt(void* backend, keel_dtype dt, void* dinp, float* dweight, const void* dout,
                                const void* inp, const void* weight, const float* rstd, int64_t N, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rmsnorm_backward");
    require_sizes({N, C}, "rmsnorm_backward");
    StreamScratch scratch(b, dweight ? static_cast<size_t>(keel::cuda::layernorm_backward_scratch_floats(N, C)) *
                                           sizeof(float)
                                     : 0);
    keel::cuda::rmsnorm_backward(e, dinp, dweight, dout, inp, weight, rstd, N, C, static_cast<float*>(scratch.ptr),
                                 b.stream);
    launched("rmsnorm_backward");
  });
}

void require_rope_shape(int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t stride, int64_t first,
                        const char* op) {
  require_sizes({B, T, heads, head_dim, stride, first}, op);
  require(head_dim % 2 == 0, std::string(op) + ": head_dim " + std::to_string(head_dim) + " is odd");
  require(first + heads * head_dim <= stride, std::string(op) + ": heads end at column " +
                                                  std::to_string(first + heads * head_dim) +
                                                  ", past the row stride " + std::to_string(stride));
}

keel_status rope_forward_dt(void* backend, keel_dtype dt, void* x, const float* inv_freq, int64_t B, int64_t T,
                            int64_t heads, int64_t head_dim, int64_t stride, int64_t first, int64_t position0) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_forward");
    require_rope_shape(B, T, heads, head_dim, stride, first, "rope_forward");
    keel::cuda::rope(e, x, inv_freq, B, T, heads, head_dim, stride, first, position0, false, b.stream);
    launched("rope_forward");
  });
}

keel_status rope_backward_dt(void* backend, keel_dtype dt, void* dx, const float* inv_freq, int64_t B, int64_t T,
                             int64_t heads, int64_t head_dim, int64_t stride, int64_t first, int64_t position0) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "rope_backward");
    require_rope_shape(B, T, heads, head_dim, stride, first, "rope_backward");
    keel::cuda::rope(e, dx, inv_freq, B, T, heads, head_dim, stride, first, position0, true, b.stream);
    launched("rope_backward");
  });
}

keel_status swiglu_forward_dt(void* backend, keel_dtype dt, void* out, const void* gate_up, int64_t N, int64_t F) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "swiglu_forward");
    require_sizes({N, F}, "swiglu_forward");
    keel::cuda::swiglu_forward(e, out, gate_up, N, F, b.stream);
    launched("swiglu_forward");
  });
}

keel_status swiglu_backward_dt(void* backend, keel_dtype dt, void* dgate_up, const void* dout, const void* gate_up,
                               int64_t N, int64_t F) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "swiglu_backward");
    require_sizes({N, F}, "swiglu_backward");
    keel::cuda::swiglu_backward(e, dgate_up, dout, gate_up, N, F, b.stream);
    launched("swiglu_backward");
  });
}

void require_gqa_shape(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, const char* op) {
  require_attention_shape(B, T, C, NH, op, keel::cuda::kCudnnMaxHeadSize);
  require(NKV > 0 && NH % NKV == 0, std::string(op) + ": NH = " + std::to_string(NH) +
                                        " must be a positive multiple of NKV = " + std::to_string(NKV));
  require(B * NKV < (int64_t{1} << 31), std::string(op) + ": B·NKV is beyond the CUDA grid");
}

int64_t attention_gqa_saved_bytes(void* backend, keel_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH,
                                  int64_t NKV) {
  int64_t bytes = -1;
  run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "attention_gqa_saved_bytes");
    require_gqa_shape(B, T, C, NH, NKV, "attention_gqa_saved_bytes");
    bytes = saved_bytes_on(b, e, B, T, C, NH, NKV, "attention_gqa_saved_bytes");
  });
  return bytes;
}

keel_status attention_gqa_forward_dt(void* backend, keel_dtype dt, void* out, void* saved, const void* qkv,
                                     int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "attention_gqa_forward");
    require_gqa_shape(B, T, C, NH, NKV, "attention_gqa_forward");
    attention_forward_on(b, e, out, static_cast<float*>(saved), qkv, B, T, C, NH, NKV, "attention_gqa_forward");
  });
}

keel_status attention_gqa_backward_dt(void* backend, keel_dtype dt, void* dqkv, const void* dout, const void* qkv,
                                      const void* out, const void* saved, int64_t B, int64_t T, int64_t C, int64_t NH,
                                      int64_t NKV) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "attention_gqa_backward");
    require_gqa_shape(B, T, C, NH, NKV, "attention_gqa_backward");
    attention_backward_on(b, e, dqkv, dout, qkv, out, static_cast<const float*>(saved), B, T, C, NH, NKV,
                          "attention_gqa_backward");
  });
}

keel_status gelu_forward_dt(void* backend, keel_dtype dt, void* out, const void* inp, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "gelu_forward");
    require_sizes({n}, "gelu_forward");
    keel::cuda::gelu_forward(e, out, inp, n, b.stream);
    launched("gelu_forward");
  });
}

keel_status gelu_backward_dt(void* backend, keel_dtype dt, void* dinp, const void* inp, const void* dout, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "gelu_backward");
    require_sizes({n}, "gelu_backward");
    keel::cuda::gelu_backward(e, dinp, inp, dout, n, b.stream);
    launched("gelu_backward");
  });
}

keel_status add_dt(void* backend, keel_dtype dt, void* out, const void* a, const void* x, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "add");
    require_sizes({n}, "add");
    keel::cuda::add(e, out, a, x, n, b.stream);
    launched("add");
  });
}

keel_status accumulate_dt(void* backend, keel_dtype dt, void* dst, const void* src, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "accumulate");
    require_sizes({n}, "accumulate");
    keel::cuda::accumulate(e, dst, src, n, b.stream);
    launched("accumulate");
  });
}

keel_status scale_dt(void* backend, keel_dtype dt, void* x, float alpha, int64_t n) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "scale");
    require_sizes({n}, "scale");
    keel::cuda::scale(e, x, alpha, n, b.stream);
    launched("scale");
  });
}

void require_row_block(int64_t begin, int64_t count, const char* op, const char* begin_name, const char* count_name) {
  require(begin >= 0 && count >= 0, std::string(op) + ": need " + begin_name + " >= 0 and " + count_name +
                                        " >= 0, found " + std::to_string(begin) + " and " + std::to_string(count));
}

// The whole table is the block of rows [0, 2^62): any non-negative token id is in it.
constexpr int64_t kAllRows = int64_t{1} << 62;

keel_status embedding_forward_dt(void* backend, keel_dtype dt, void* out, const int32_t* tokens, const void* wte,
                                 const void* wpe, int64_t B, int64_t T, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "embedding_forward");
    require_sizes({B, T, C}, "embedding_forward");
    require(wpe != nullptr, "embedding_forward: wpe is NULL");
    keel::cuda::embedding_forward(e, out, tokens, wte, wpe, B, T, C, 0, kAllRows, b.stream);
    launched("embedding_forward");
  });
}

// The dwte scatter sorts the positions by token in scratch, handed back at once: the stream
// orders its next user after these kernels.
void embedding_backward_with_scratch(CudaBackend& b, Elem e, float* dwte_rows, float* dwpe, const void* dout,
                                     const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                     int64_t rows, const char* op) {
  require(!dwte_rows || B * T <= INT32_MAX,
          std::string(op) + ": B*T = " + std::to_string(B * T) + " positions exceed 2^31 - 1");
  const int64_t bytes = dwte_rows ? keel::cuda::embedding_backward_scratch_bytes(B, T, C) : 0;
  void* scratch = bytes > 0 ? b.allocator.allocate(static_cast<size_t>(bytes), b.stream) : nullptr;
  cudaError_t status = keel::cuda::embedding_backward(e, dwte_rows, dwpe, dout, tokens, B, T, C, row_begin, rows,
                                                      scratch, bytes, b.stream);
  if (status == cudaSuccess) status = cudaGetLastError();
  if (scratch) b.allocator.release(scratch);
  check_cuda(status, std::string(op) + ": kernel launch");
}

keel_status embedding_backward_dt(void* backend, keel_dtype dt, float* dwte, float* dwpe, const void* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "embedding_backward");
    require_sizes({B, T, C}, "embedding_backward");
    embedding_backward_with_scratch(b, e, dwte, dwpe, dout, tokens, B, T, C, 0, kAllRows, "embedding_backward");
  });
}

keel_status embedding_rows_forward_dt(void* backend, keel_dtype dt, void* out, const int32_t* tokens,
                                      const void* wte_rows, const void* wpe, int64_t B, int64_t T, int64_t C,
                                      int64_t row_begin, int64_t rows) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "embedding_rows_forward");
    require_sizes({B, T, C}, "embedding_rows_forward");
    require_row_block(row_begin, rows, "embedding_rows_forward", "row_begin", "rows");
    keel::cuda::embedding_forward(e, out, tokens, wte_rows, wpe, B, T, C, row_begin, rows, b.stream);
    launched("embedding_rows_forward");
  });
}

keel_status embedding_rows_backward_dt(void* backend, keel_dtype dt, float* dwte_rows, float* dwpe, const void* dout,
                                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                       int64_t rows) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "embedding_rows_backward");
    require_sizes({B, T, C}, "embedding_rows_backward");
    require_row_block(row_begin, rows, "embedding_rows_backward", "row_begin", "rows");
    embedding_backward_with_scratch(b, e, dwte_rows, dwpe, dout, tokens, B, T, C, row_begin, rows,
                                    "embedding_rows_backward");
  });
}

void require_column_block(int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols, const char* op) {
  require_sizes({N, cols}, op);
  require_row_block(col_begin, valid_cols, op, "col_begin", "valid_cols");
  require(valid_cols <= cols,
          std::string(op) + ": valid_cols " + std::to_string(valid_cols) + " exceeds cols " + std::to_string(cols));
  require(N < (int64_t{1} << 31), std::string(op) + ": N = " + std::to_string(N) + " rows exceed the CUDA grid");
}

keel_status crossentropy_stats_dt(void* backend, keel_dtype dt, float* stats, const void* logits,
                                  const int32_t* targets, int64_t N, int64_t col_begin, int64_t valid_cols,
                                  int64_t cols) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "crossentropy_stats");
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_stats");
    keel::cuda::crossentropy_stats(e, stats, logits, targets, N, col_begin, valid_cols, cols, b.stream);
    launched("crossentropy_stats");
  });
}

keel_status crossentropy_combine(void* backend, float* lse, float* loss_sum, const float* stats, int32_t n_shards,
                                 const int32_t* targets, int64_t N, float weight) {
  return run(backend, [&](CudaBackend& b) {
    require_sizes({N}, "crossentropy_combine");
    require(n_shards >= 1, "crossentropy_combine: n_shards = " + std::to_string(n_shards) + ", need at least 1");
    require(N == 0 || (lse && loss_sum && stats && targets), "crossentropy_combine: NULL pointer");
    keel::cuda::crossentropy_combine(lse, loss_sum, stats, n_shards, targets, N, weight, b.stream);
    launched("crossentropy_combine");
  });
}

keel_status crossentropy_backward_dt(void* backend, keel_dtype dt, void* dlogits, const void* logits, const float* lse,
                                     const int32_t* targets, float dloss, int64_t N, int64_t col_begin,
                                     int64_t valid_cols, int64_t cols) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "crossentropy_backward");
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_backward");
    keel::cuda::crossentropy_backward(e, dlogits, logits, lse, targets, dloss, N, col_begin, valid_cols, cols,
                                      dlogits == logits, b.stream);
    launched("crossentropy_backward");
  });
}

keel_status sum_squares_dt(void* backend, keel_dtype dt, const void* x, int64_t n, float* acc) {
  return run(backend, [&](CudaBackend& b) {
    const Elem e = elem_of(dt, "sum_squares");
    require_sizes({n}, "sum_squares");
    require(acc != nullptr, "sum_squares: acc is NULL");
    keel::cuda::sum_squares(e, x, n, acc, reinterpret_cast<float*>(b.reduce_partial()), b.stream);
    launched("sum_squares");
  });
}

keel_status adamw_update(void* backend, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                         double beta1, double beta2, double eps, double weight_decay, float grad_scale, int64_t step) {
  return run(backend, [&](CudaBackend& b) {
    require_sizes({n}, "adamw_update");
    require(step >= 1, "adamw_update: step " + std::to_string(step) + " is not 1-based");
    require(n == 0 || (params && grads && m && v), "adamw_update: NULL pointer");
    keel::cuda::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, step, b.stream);
    launched("adamw_update");
  });
}

keel_status sgd_update(void* backend, float* params, const float* grads, float* momentum_buffer, int64_t n, float lr,
                       double momentum, double dampening, int32_t nesterov, double weight_decay, float grad_scale,
                       int64_t step) {
  return run(backend, [&](CudaBackend& b) {
    require_sizes({n}, "sgd_update");
    require(step >= 1, "sgd_update: step " + std::to_string(step) + " is not 1-based");
    require(n == 0 || (params && grads), "sgd_update: NULL pointer");
    require(n == 0 || momentum <= 0.0 || momentum_buffer, "sgd_update: momentum > 0 needs a momentum_buffer");
    keel::cuda::sgd_update(params, grads, momentum_buffer, n, lr, momentum, dampening, nesterov != 0, weight_decay,
                           grad_scale, step, b.stream);
    launched("sgd_update");
  });
}

// --- the fp32 slots of 0.1 and 0.6 ---

constexpr keel_dtype kF32{KEEL_DTYPE_FLOAT, 32, 1};

keel_status matmul_forward(void* backend, float* out, const float* inp, const float* weight, const float* bias,
                           int64_t N, int64_t IC, int64_t OC) {
  return matmul_forward_dt(backend, kF32, out, nullptr, inp, weight, bias, N, IC, OC);
}

keel_status matmul_backward(void* backend, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC) {
  return matmul_backward_dt(backend, kF32, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

keel_status layernorm_forward(void* backend, float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int64_t N, int64_t C) {
  return layernorm_forward_dt(backend, kF32, out, mean, rstd, inp, weight, bias, N, C);
}

keel_status layernorm_backward(void* backend, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                               int64_t C) {
  return layernorm_backward_dt(backend, kF32, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// 0.1's attention_backward is not handed the forward's output, which the flash-style backward
// needs, so 0.1's `saved` holds the log-sum-exps (B·NH·T floats) followed by a copy of out
// (B·T·C floats).
int64_t attention_saved_floats(void* backend, int64_t B, int64_t T, int64_t C, int64_t NH) {
  int64_t floats = -1;
  run(backend, [&](CudaBackend&) {
    require_attention_shape(B, T, C, NH, "attention_saved_floats");
    floats = B * NH * T + B * T * C;
  });
  return floats;
}

keel_status attention_forward(void* backend, float* out, float* saved, const float* qkv, int64_t B, int64_t T,
                              int64_t C, int64_t NH) {
  return run(backend, [&](CudaBackend& b) {
    require_attention_shape(B, T, C, NH, "attention_forward");
    attention_forward_on(b, Elem::f32, out, saved, qkv, B, T, C, NH, NH, "attention_forward");
    if (B * T * C > 0)
      check_cuda(cudaMemcpyAsync(saved + B * NH * T, out, static_cast<size_t>(B * T * C) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, b.stream),
                 "attention_forward: saving out");
  });
}

keel_status attention_backward(void* backend, float* dqkv, const float* dout, const float* qkv, const float* saved,
                               int64_t B, int64_t T, int64_t C, int64_t NH) {
  return run(backend, [&](CudaBackend& b) {
    require_attention_shape(B, T, C, NH, "attention_backward");
    attention_backward_on(b, Elem::f32, dqkv, dout, qkv, saved + B * NH * T, saved, B, T, C, NH, NH,
                          "attention_backward");
  });
}

keel_status gelu_forward(void* backend, float* out, const float* inp, int64_t n) {
  return gelu_forward_dt(backend, kF32, out, inp, n);
}
keel_status gelu_backward(void* backend, float* dinp, const float* inp, const float* dout, int64_t n) {
  return gelu_backward_dt(backend, kF32, dinp, inp, dout, n);
}
keel_status add(void* backend, float* out, const float* a, const float* x, int64_t n) {
  return add_dt(backend, kF32, out, a, x, n);
}
keel_status accumulate(void* backend, float* dst, const float* src, int64_t n) {
  return accumulate_dt(backend, kF32, dst, src, n);
}
keel_status scale(void* backend, float* x, float alpha, int64_t n) { return scale_dt(backend, kF32, x, alpha, n); }

keel_status embedding_forward(void* backend, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int64_t B, int64_t T, int64_t C) {
  return embedding_forward_dt(backend, kF32, out, tokens, wte, wpe, B, T, C);
}
keel_status embedding_backward(void* backend, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int64_t B, int64_t T, int64_t C) {
  return embedding_backward_dt(backend, kF32, dwte, dwpe, dout, tokens, B, T, C);
}

void require_vocab(int64_t N, int64_t V, int64_t Vp, const char* op) {
  require_sizes({N, V, Vp}, op);
  require(V > 0 && V <= Vp,
          std::string(op) + ": need 0 < V <= Vp, found V = " + std::to_string(V) + ", Vp = " + std::to_string(Vp));
  require(N < (int64_t{1} << 31), std::string(op) + ": N = " + std::to_string(N) + " rows exceed the CUDA grid");
}

keel_status crossentropy_forward(void* backend, float* losses, float* probs, const float* logits,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  return run(backend, [&](CudaBackend& b) {
    require_vocab(N, V, Vp, "crossentropy_forward");
    keel::cuda::crossentropy_probs_forward(losses, probs, logits, targets, N, V, Vp, b.stream);
    launched("crossentropy_forward");
  });
}

keel_status crossentropy_backward(void* backend, float* dlogits, const float* probs, const int32_t* targets,
                                  float dloss, int64_t N, int64_t V, int64_t Vp) {
  return run(backend, [&](CudaBackend& b) {
    require_vocab(N, V, Vp, "crossentropy_backward");
    keel::cuda::crossentropy_probs_backward(dlogits, probs, targets, dloss, N, V, Vp, b.stream);
    launched("crossentropy_backward");
  });
}

// 0.1: the result reaches the host, so this waits for everything issued before it.
keel_status sum_squares(void* backend, const float* x, int64_t n, double* out_host) {
  return run(backend, [&](CudaBackend& b) {
    require_sizes({n}, "sum_squares");
    require(out_host != nullptr, "sum_squares: out_host is NULL");
    if (n == 0) {
      *out_host = 0.0;
      return;
    }
    keel::cuda::sum_squares_double(x, n, b.reduce_result(), b.reduce_partial(), b.stream);
    launched("sum_squares");
    double result = 0.0;
    check_cuda(cudaMemcpyAsync(&result, b.reduce_result(), sizeof(double), cudaMemcpyDeviceToHost, b.stream),
               "sum_squares: cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(b.stream), "sum_squares: cudaStreamSynchronize");
    *out_host = result;
  });
}

keel_status embedding_rows_forward(void* backend, float* out, const int32_t* tokens, const float* wte_rows,
                                   const float* wpe, int64_t B, int64_t T, int64_t C, int64_t row_begin, int64_t rows) {
  return embedding_rows_forward_dt(backend, kF32, out, tokens, wte_rows, wpe, B, T, C, row_begin, rows);
}
keel_status embedding_rows_backward(void* backend, float* dwte_rows, float* dwpe, const float* dout,
                                    const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t row_begin,
                                    int64_t rows) {
  return embedding_rows_backward_dt(backend, kF32, dwte_rows, dwpe, dout, tokens, B, T, C, row_begin, rows);
}
keel_status crossentropy_shard_stats(void* backend, float* stats, const float* logits, const int32_t* targets,
                                     int64_t N, int64_t col_begin, int64_t valid_cols, int64_t cols) {
  return crossentropy_stats_dt(backend, kF32, stats, logits, targets, N, col_begin, valid_cols, cols);
}

// 0.6 always adds, even when a caller hands the logits as their own gradient.
keel_status crossentropy_shard_backward(void* backend, float* dlogits, const float* logits, const float* lse,
                                        const int32_t* targets, float dloss, int64_t N, int64_t col_begin,
                                        int64_t valid_cols, int64_t cols) {
  return run(backend, [&](CudaBackend& b) {
    require_column_block(N, col_begin, valid_cols, cols, "crossentropy_shard_backward");
    keel::cuda::crossentropy_backward(Elem::f32, dlogits, logits, lse, targets, dloss, N, col_begin, valid_cols, cols,
                                      false, b.stream);
    launched("crossentropy_shard_backward");
  });
}

keel_backend_api make_api() {
  keel_backend_api api{};
  api.struct_size = sizeof(keel_backend_api);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_1);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_6);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_QUEUE_SLOTS_0_8);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_DT_SLOTS_0_8);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_OPTIMIZER_SLOTS_0_8);
  KEEL_FILL_BACKEND_SLOTS(api, KEEL_BACKEND_SLOTS_0_9);  // no attention_decode_dt (0.18): whole windows
  fill_moe_slots(api);
  fill_block_attention_slots(api);
  fill_quant_slots(api);
  fill_dropout_slots(api);
  return api;
}

}  // namespace

extern "C" KEEL_EXPORT const keel_plugin_list* keel_plugin_entry(void) {
  static const keel_backend_api api = make_api();
  static const std::string description = "CUDA backend (cuBLASLt; attention: " + attention_summary() +
                                         "; fp32 or bf16); verified on an NVIDIA H200, driver 580.159.04, CUDA 13";
  static const keel_plugin_info infos[] = {
      keel_support::plugin_info(KEEL_KIND_BACKEND, "cuda", "0.1.0", &api, description.c_str())};
  static const keel_plugin_list list = keel_support::plugin_list(infos);
  return &list;
}
