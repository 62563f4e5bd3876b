// A communicator's life: joining the world on the backend's device, splitting it, settling
// NCCL's non-blocking calls under the deadline, the watchdog's view of what is in flight, and
// ending the world (see nccl_communicator.hpp). The operations are in nccl_operations.cpp.
#include "nccl_communicator.hpp"

#include <keel/plugin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/launcher_env.hpp>  // defines: mpi_launcher_variable

#include "launcher_mpi.hpp"
#include "nccl_watchdog.hpp"

namespace keel_nccl {
namespace {

using keel_support::StatusError;
using Clock = std::chrono::steady_clock;

// The whole world's rank and size, for abort messages (a split communicator knows only its own).
int g_world_rank = 0, g_world_size = 1;

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

std::string device_type_name(int32_t type) {
  switch (type) {
    case KEEL_DEVICE_CPU: return "cpu (KEEL_DEVICE_CPU)";
    case KEEL_DEVICE_CUDA: return "cuda (KEEL_DEVICE_CUDA)";
    case KEEL_DEVICE_CUDA_HOST: return "pinned host memory (KEEL_DEVICE_CUDA_HOST)";
    case KEEL_DEVICE_EXT: return "a test device (KEEL_DEVICE_EXT)";
    default: return "device type " + std::to_string(type);
  }
}

// The backend's device and queue, or an error naming what is wrong with them.
std::pair<keel_device, cudaStream_t> cuda_device_and_queue(const keel_backend_api* backend, void* backend_obj) {
  if (!backend || !backend_obj)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create_world_on: the backend is NULL; the nccl comm runs on the "
                                                 "backend's CUDA device and queue");
  keel_device device{};
  if (!backend->device) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "create_world_on: the backend has no device slot");
  keel_support::check_callee(backend->device(backend_obj, &device), "backend device");
  if (device.device_type != KEEL_DEVICE_CUDA)
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create_world_on: the nccl comm moves CUDA device memory, but the "
                                              "backend's memory is on " + device_type_name(device.device_type) +
                                              "; use a CUDA backend, or the mpi comm for host memory");
  if (!KEEL_HAS_SLOT(backend, queue))
    throw StatusError(KEEL_ERR_UNIMPLEMENTED, "create_world_on: the backend was built before ABI 0.8 and has no "
                                              "queue slot, so the nccl comm cannot order itself on its stream");
  void* queue = nullptr;
  keel_support::check_callee(backend->queue(backend_obj, &queue), "backend queue");
  return {device, static_cast<cudaStream_t>(queue)};
}

// NCCL's id for a new world: made by rank 0 and broadcast over the launcher's MPI.
ncclUniqueId world_unique_id(const LauncherWorld& world, bool launched) {
  ncclUniqueId id{};
  if (world.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess)
      throw StatusError(KEEL_ERR_IO, std::string("create_world_on: ncclGetUniqueId: ") + ncclGetErrorString(result) +
                                         " (" + ncclGetLastError(nullptr) + ")");
  }
  if (launched) broadcast_from_rank0(&id, sizeof id);
  return id;
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

void check_cuda(cudaError_t error, const std::string& what) {
  if (error != cudaSuccess)
    throw keel_support::StatusError(KEEL_ERR_IO, what + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

Communicator::Communicator(const keel_host* host, const NcclCommConfig& config, int device, cudaStream_t stream)
    : CommState(host), config_(config), device_(device), stream_(stream) {}

std::unique_ptr<Communicator> Communicator::create_world_on(const keel_host* host, const NcclCommConfig& config,
                                                            const keel_backend_api* backend, void* backend_obj) {
  const auto [device, stream] = cuda_device_and_queue(backend, backend_obj);
  check_cuda(cudaSetDevice(device.device_id), "create_world_on: cudaSetDevice(" + std::to_string(device.device_id) + ")");
  const bool launched = !keel_support::mpi_launcher_variable().empty();
  const LauncherWorld world = launched ? join_launcher_world(host) : LauncherWorld{0, 1};
  g_world_rank = world.rank, g_world_size = world.size;
  const ncclUniqueId id = world_unique_id(world, launched);

  auto communicator = std::unique_ptr<Communicator>(new Communicator(host, config, device.device_id, stream));
  communicator->rank_ = world.rank, communicator->size_ = world.size;
  ncclConfig_t nccl_config = non_blocking_config();
  const ncclResult_t started = ncclCommInitRankConfig(&communicator->comm_, world.size, id, world.rank, &nccl_config);
  if (started != ncclSuccess && started != ncclInProgress)
    throw StatusError(KEEL_ERR_IO, std::string("create_world_on: ncclCommInitRankConfig: ") +
                                       ncclGetErrorString(started) + " (" + ncclGetLastError(nullptr) + ")");
  communicator->settle(communicator->comm_, "NCCL init of a world of " + std::to_string(world.size));
  watch_communicator(communicator.get());
  if (host && world.rank == 0)
    keel_logf(host, KEEL_LOG_INFO, "comm nccl", "joined a world of %d ranks on CUDA device %d%s", world.size,
              device.device_id, launched ? "" : " (no launcher: a world of one)");
  return communicator;
}

Communicator::~Communicator() {
  stop_watching(this);
  if (comm_) {
    // Finalize flushes what is queued; a peer that never comes would hang it, hence settle. A
    // communicator whose init or finalize failed is aborted instead.
    bool finalised = false;
    try {
      const ncclResult_t result = ncclCommFinalize(comm_);
      if (result == ncclInProgress || result == ncclSuccess) {
        settle(comm_, "NCCL finalize");
        finalised = true;
      }
    } catch (const std::exception& e) {
      if (host_) keel_logf(host_, KEEL_LOG_WARN, "comm nccl", "destroy: %s; aborting the communicator", e.what());
    }
    if (finalised) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  for (const SelfMessage& message : unreceived_) cudaFreeAsync(message.staged, stream_);
  for (const InFlight& entry : in_flight_) cudaEventDestroy(entry.event);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
}

std::unique_ptr<Communicator> Communicator::split(int32_t color, int32_t key) {
  if (color < 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "split: color must be >= 0, found " + std::to_string(color));
  auto child = std::unique_ptr<Communicator>(new Communicator(host_, config_, device_, stream_));
  ncclConfig_t nccl_config = non_blocking_config();
  check_nccl(ncclCommSplit(comm_, color, key, &child->comm_, &nccl_config), "split");
  // Non-blocking, NCCL fills in the child's handle only once the parent leaves ncclInProgress
  // (NVIDIA/nccl#1472; seen on an H200: the handle was still NULL on return).
  settle(comm_, "NCCL split (the parent)");
  if (!child->comm_) throw StatusError(KEEL_ERR_INTERNAL, "split: NCCL finished the split but gave no communicator");
  child->settle(child->comm_, "NCCL split");
  check_nccl(ncclCommCount(child->comm_, &child->size_), "split: ncclCommCount");
  check_nccl(ncclCommUserRank(child->comm_, &child->rank_), "split: ncclCommUserRank");
  child->counters_ = counters_.for_split();
  watch_communicator(child.get());
  return child;
}

void Communicator::settle(ncclComm_t comm, const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(config_.timeout_s));
  ncclResult_t state = ncclInProgress;
  for (;;) {
    const ncclResult_t queried = ncclCommGetAsyncError(comm, &state);
    if (queried != ncclSuccess) state = queried;
    if (state != ncclInProgress) break;
    if (Clock::now() > deadline) {
      if (comm != comm_) ncclCommAbort(comm);
      abort_world(1, what + " timed out after " + seconds_text(config_.timeout_s) +
                         "s (another rank died or never joined)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (state != ncclSuccess)
    throw StatusError(KEEL_ERR_IO, what + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                       ": " + ncclGetErrorString(state) + " (" + ncclGetLastError(comm) + ")");
}

void Communicator::check_nccl(ncclResult_t result, const std::string& what) {
  if (result == ncclInProgress) return settle(comm_, what);
  if (result != ncclSuccess)
    throw StatusError(KEEL_ERR_IO, what + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                       ": " + ncclGetErrorString(result) + " (" + ncclGetLastError(comm_) + ")");
}

void Communicator::queued(int op, uint64_t bytes, const std::string& what) {
  counters_.count(op, bytes);
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what + ": cudaEventCreate");
  }
  const cudaError_t recorded = cudaEventRecord(event, stream_);
  if (recorded != cudaSuccess) {
    spare_events_.push_back(event);
    check_cuda(recorded, what + ": cudaEventRecord");
  }
  in_flight_.push_back(InFlight{event, Clock::now(), what});
}

std::string Communicator::overdue_or_failed(Clock::time_point now) {
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
    return std::string("NCCL failed in the background: ") + ncclGetErrorString(state) + " (" +
           ncclGetLastError(comm_) + ")";
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  cudaSetDevice(device_);  // the watchdog's thread: its events belong to this device
  while (!in_flight_.empty()) {
    const cudaError_t passed = cudaEventQuery(in_flight_.front().event);
    if (passed == cudaErrorNotReady) break;
    if (passed != cudaSuccess)
      return in_flight_.front().what + ": the CUDA stream failed: " + cudaGetErrorString(passed);
    spare_events_.push_back(in_flight_.front().event);
    in_flight_.pop_front();
  }
  if (in_flight_.empty()) return "";
  const InFlight& oldest = in_flight_.front();
  if (now - oldest.queued_at <= std::chrono::duration<double>(config_.timeout_s)) return "";
  return oldest.what + " timed out after " + seconds_text(config_.timeout_s) +
         "s on the GPU (another rank died or stopped calling it)";
}

void Communicator::hand_out(const std::string& what, keel_comm_request** out) {
  if (!out) return;
  auto request = std::make_unique<keel_comm_request>();
  request->what = what;
  *out = request.release();
}

void Communicator::wait(keel_comm_request* request) {
  std::unique_ptr<keel_comm_request> owned(request);
  if (owned->self && !owned->self->done) {
    posted_.erase(std::remove(posted_.begin(), posted_.end(), owned->self), posted_.end());
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                      owned->what + ": no matching send to itself was posted, so it would wait forever");
  }
  if (owned->self && !owned->self->error.empty())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, owned->what + ": " + owned->self->error);
  // Otherwise the operation is on the stream already (see the header): nothing to wait for.
}

int32_t Communicator::reaches(keel_device device) const {
  return device.device_type == KEEL_DEVICE_CUDA && device.device_id == device_ ? KEEL_COMM_REACH_QUEUED
                                                                               : KEEL_COMM_REACH_NONE;
}

void Communicator::abort_world(int32_t exit_code, const std::string& reason) {
  // A shell sees only the low 8 bits of a status, and 0 would read as success.
  const int code = exit_code > 0 && exit_code < 256 ? exit_code : 1;
  std::fprintf(stderr, "keel: rank %d of %d: %s\n", g_world_rank, g_world_size, reason.c_str());
  std::fflush(stderr);
  hold_watchdog();                  // it must not query the communicator that is aborted now
  if (comm_) ncclCommAbort(comm_);  // kernels waiting on a peer stop; the others' NCCL sees us gone
  abort_launcher_world(code);       // mpirun/srun then end every rank (no-op without a launcher)
  std::_Exit(code);
}

}  // namespace keel_nccl
