// cuDNN's fused flash attention through the cudnn-frontend graph API (the pinned 1.32.0 headers,
// scripts/fetch-cudnn-frontend.sh). The only file that includes them: they take a minute to
// compile. q, k and v are read in place from the packed projection and the gradients written in
// place into the packed gradient, by strides alone, so no permute kernel runs either way.
//
// libcudnn is opened with dlopen (the frontend's dynamic-loading mode): KEEL_CUDNN_LIBRARY when
// set, else the loader's libcudnn.so.9. The frontend then limits itself to what the older of the
// headers (cuDNN 9.19 on the build machine) and the library it finds can do, and a graph the
// library cannot build is a refusal, not an error: the backend's own kernels take that shape.
// The backward is built deterministic (no atomics in dQ) unless asked otherwise, which keeps
// resumes bit for bit.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include "cuda/attention_cudnn.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads every symbol through it
}

namespace keel::cuda {
namespace {

namespace fe = cudnn_frontend;
using Graph = std::shared_ptr<fe::graph::Graph>;

// The oldest cuDNN taken at all; newer features are the frontend's to check against the library.
constexpr size_t kMinimumCudnn = 90000;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string version_text(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

void check(fe::error_t status, const char* step) {
  if (status.is_bad()) throw std::runtime_error(std::string(step) + ": " + status.get_message());
}

CudnnLibrary load_library() {
  CudnnLibrary lib;
  const char* configured = std::getenv("KEEL_CUDNN_LIBRARY");
  const std::string name = configured && *configured ? configured : "libcudnn.so.9";
  dlerror();
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    lib.text = "cannot open " + name + (error ? std::string(": ") + error : std::string());
    return lib;
  }
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  if (!get_version) {
    lib.text = name + " has no cudnnGetVersion";
    dlclose(handle);
    return lib;
  }
  const size_t found = get_version();
  if (found < kMinimumCudnn || found / 10000 != CUDNN_MAJOR) {
    lib.text = name + " is cuDNN " + version_text(found) + "; the cuda backend takes cuDNN " +
               std::to_string(CUDNN_MAJOR) + ".x from " + version_text(kMinimumCudnn);
    dlclose(handle);
    return lib;
  }
  fe::cudnn_dlhandle = handle;
  lib.usable = true;
  lib.text = "cuDNN " + version_text(found) + " (" + name + "; built against " + version_text(CUDNN_VERSION) +
             ", frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
             std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) +
             (found < CUDNN_VERSION ? "; older than the headers, so the frontend keeps to its features" : "") + ")";
  return lib;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(const Graph& g, const char* name, Uid uid,
                                                    std::vector<int64_t> dim, std::vector<int64_t> stride) {
  return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

// The packed layout's dims and strides, cuDNN's (batch, head, sequence, channel) order.
struct Layout {
  std::vector<int64_t> q, kv, qkv_stride, o, o_stride, stats, stats_stride;
  explicit Layout(const AttentionShape& s) {
    const int64_t W = s.row_width(), C = s.C();
    q = {s.B, s.NH, s.T, s.hs};
    kv = {s.B, s.NKV, s.T, s.hs};
    qkv_stride = {s.T * W, s.hs, W, 1};
    o = q;
    o_stride = {s.T * C, s.hs, C, 1};
    stats = {s.B, s.NH, s.T, 1};
    stats_stride = {s.NH * s.T, s.T, 1, 1};
  }
};

Graph new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

void finish(const Graph& g, cudnnHandle_t handle) {
  check(g->validate(), "validate");
  check(g->build_operation_graph(handle), "build_operation_graph");
  check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  check(g->check_support(handle), "check_support");
  check(g->build_plans(handle), "build_plans");
}

Graph build_forward(const AttentionShape& s, cudnnHandle_t handle) {
  const Layout l(s);
  Graph g = new_graph();
  auto q = input(g, "Q", kQ, l.q, l.qkv_stride);
  auto k = input(g, "K", kK, l.kv, l.qkv_stride);
  auto v = input(g, "V", kV, l.kv, l.qkv_stride);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.hs)));
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(l.o).set_stride(l.o_stride);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(l.stats).set_stride(
      l.stats_stride);
  finish(g, handle);
  return g;
}

Graph build_backward(const AttentionShape& s, cudnnHandle_t handle, bool deterministic) {
  const Layout l(s);
  Graph g = new_graph();
  auto q = input(g, "Q", kQ, l.q, l.qkv_stride);
  auto k = input(g, "K", kK, l.kv, l.qkv_stride);
  auto v = input(g, "V", kV, l.kv, l.qkv_stride);
  auto o = input(g, "O", kO, l.o, l.o_stride);
  auto dout = input(g, "dO", kDO, l.o, l.o_stride);
  auto stats = input(g, "Stats", kStats, l.stats, l.stats_stride);
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_causal_mask(true)
                     .set_deterministic_algorithm(deterministic)
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.hs)));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_uid(kDQ).set_dim(l.q).set_stride(l.qkv_stride);
  dk->set_output(true).set_uid(kDK).set_dim(l.kv).set_stride(l.qkv_stride);
  dv->set_output(true).set_uid(kDV).set_dim(l.kv).set_stride(l.qkv_stride);
  finish(g, handle);
  return g;
}

void execute(const Graph& g, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, void* workspace,
             cudaStream_t stream, const char* what) {
  const cudnnStatus_t set = fe::detail::set_stream(handle, stream);
  if (set != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cudnnSetStream failed");
  check(g->execute(handle, pack, workspace), what);
}

}  // namespace

const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary lib = load_library();
  return lib;
}

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  bool deterministic = true;
  size_t max_workspace = 0;
  struct Entry {
    Graph forward, backward;
    size_t forward_workspace = 0, backward_workspace = 0;
    std::string refusal;  // empty: cuDNN runs this shape
  };
  std::unordered_map<AttentionShape, Entry, AttentionShapeHash> graphs;

  const Entry& entry(const AttentionShape& s) const {
    auto it = graphs.find(s);
    if (it == graphs.end() || !it->second.refusal.empty())
      throw std::logic_error("cuDNN attention: a shape used before prepare() accepted it");
    return it->second;
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudnnAttention::~CudnnAttention() {
  if (impl_ && impl_->handle) {
    impl_->graphs.clear();
    fe::detail::destroy_handle(impl_->handle);
  }
}

std::unique_ptr<CudnnAttention> CudnnAttention::open(bool deterministic, size_t max_workspace_bytes,
                                                     std::string* why_not) {
  // The frontend opens libcudart.so.12 before .13 and keeps the first it finds: name the runtime
  // this plugin was built with, unless the user already has.
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", ("libcudart.so." + std::to_string(CUDART_VERSION / 1000)).c_str(), 0);
  const CudnnLibrary& lib = cudnn_library();
  if (!lib.usable) {
    *why_not = lib.text;
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->deterministic = deterministic;
  impl->max_workspace = max_workspace_bytes;
  try {
    const cudnnStatus_t status = fe::detail::create_handle(&impl->handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      *why_not = "cudnnCreate failed (status " + std::to_string(static_cast<int>(status)) + ")";
      return nullptr;
    }
  } catch (const std::exception& e) {
    *why_not = std::string("cudnnCreate: ") + e.what();
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

bool CudnnAttention::prepare(const AttentionShape& s, std::string* why) {
  auto it = impl_->graphs.find(s);
  if (it == impl_->graphs.end()) {
    Impl::Entry entry;
    entry.refusal = cudnn_attention_refusal(true, s);
    if (entry.refusal.empty()) {
      try {
        entry.forward = build_forward(s, impl_->handle);
        entry.backward = build_backward(s, impl_->handle, impl_->deterministic);
        int64_t fwd = 0, bwd = 0;
        check(entry.forward->get_workspace_size(fwd), "forward workspace");
        check(entry.backward->get_workspace_size(bwd), "backward workspace");
        entry.forward_workspace = static_cast<size_t>(fwd);
        entry.backward_workspace = static_cast<size_t>(bwd);
        const size_t most = std::max(entry.forward_workspace, entry.backward_workspace);
        if (most > impl_->max_workspace) {
          auto gib = [](size_t b) { return std::to_string(static_cast<double>(b) / double(size_t{1} << 30)).substr(0, 5); };
          entry = Impl::Entry{};
          entry.refusal = "its graphs need " + gib(most) + " GiB of workspace, over the " + gib(impl_->max_workspace) +
                          " GiB allowed (a quarter of the GPU's memory)" +
                          (impl_->deterministic ? "; the deterministic backward's grows as B·NH·T²" : "");
        }
      } catch (const std::exception& e) {
        entry = Impl::Entry{};
        entry.refusal = std::string("cuDNN refused the graph: ") + e.what();
      }
    }
    it = impl_->graphs.emplace(s, std::move(entry)).first;
  }
  if (why) *why = it->second.refusal;
  return it->second.refusal.empty();
}

size_t CudnnAttention::workspace_bytes(const AttentionShape& s, bool backward) const {
  const auto& e = impl_->entry(s);
  return backward ? e.backward_workspace : e.forward_workspace;
}

void CudnnAttention::forward(const AttentionShape& s, void* out, float* stats, const void* qkv, void* workspace,
                             cudaStream_t stream) {
  const auto& e = impl_->entry(s);
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  const int64_t bytes = 2;  // bf16
  std::unordered_map<int64_t, void*> pack = {
      {kQ, base}, {kK, base + s.C() * bytes}, {kV, base + (s.C() + s.NKV * s.hs) * bytes}, {kO, out}, {kStats, stats}};
  execute(e.forward, impl_->handle, pack, workspace, stream, "cuDNN attention forward");
}

void CudnnAttention::backward(const AttentionShape& s, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* stats, void* workspace, cudaStream_t stream) {
  const auto& e = impl_->entry(s);
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  char* dbase = static_cast<char*>(dqkv);
  const int64_t k_at = s.C() * 2, v_at = (s.C() + s.NKV * s.hs) * 2;
  std::unordered_map<int64_t, void*> pack = {
      {kQ, base},          {kK, base + k_at},   {kV, base + v_at},
      {kO, const_cast<void*>(out)}, {kDO, const_cast<void*>(dout)},
      {kStats, const_cast<float*>(stats)},
      {kDQ, dbase},        {kDK, dbase + k_at}, {kDV, dbase + v_at}};
  execute(e.backward, impl_->handle, pack, workspace, stream, "cuDNN attention backward");
}

}  // namespace keel::cuda
