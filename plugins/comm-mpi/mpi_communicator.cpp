// A communicator's life: joining the world or splitting it, MPI errors turned into keel errors,
// waiting under the watchdog, and ending the world (see mpi_communicator.hpp). The operations
// themselves are in mpi_operations.cpp.
#include "mpi_communicator.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include <keel_support/common/abi_guard.hpp>
#include <keel_support/common/launcher_env.hpp>  // defines: mpi_launcher_variable

#include "mpi_process.hpp"
#include "mpi_watchdog.hpp"
#include "peer_liveness.hpp"

namespace keel_mpi {
namespace {

using keel_support::StatusError;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, length);
}

}  // namespace

Communicator::Communicator(const keel_host* host, const MpiCommConfig& config, MPI_Comm comm)
    : CommState(host), config_(config), comm_(comm) {
  if (is_local()) return;
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

Communicator::~Communicator() {
  if (is_local()) return;
  MPI_Comm_free(&comm_);
  release_mpi();
}

std::unique_ptr<Communicator> Communicator::create_world(const keel_host* host, const MpiCommConfig& config) {
  const std::string launcher = keel_support::mpi_launcher_variable();
  if (launcher.empty()) {
    if (host)
      keel_logf(host, KEEL_LOG_DEBUG, "comm mpi",
                "no launcher started this process (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, PMI_RANK is "
                "set): a world of one, MPI not initialised");
    return std::unique_ptr<Communicator>(new Communicator(host, config, MPI_COMM_NULL));
  }
  acquire_mpi(host);
  try {
    // A duplicate keeps the plugin's messages apart from anyone else's on MPI_COMM_WORLD.
    MPI_Comm world = MPI_COMM_NULL;
    int code = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (code != MPI_SUCCESS) throw StatusError(KEEL_ERR_IO, "create_world: MPI_Comm_dup: " + mpi_error_string(code));
    auto communicator = std::unique_ptr<Communicator>(new Communicator(host, config, world));
    // Several heartbeats per timeout, so a silent peer is known silent when the timeout fires.
    const double interval_s =
        config.heartbeat_s > 0 ? std::max(0.01, std::min(config.heartbeat_s, config.timeout_s / 4)) : 0;
    start_peer_liveness(world, interval_s);
    if (host && communicator->rank_ == 0)
      keel_logf(host, KEEL_LOG_INFO, "comm mpi", "joined a world of %d ranks on %s (launcher found by %s)",
                communicator->size_, world_hosts_summary().c_str(), launcher.c_str());
    return communicator;
  } catch (...) {
    release_mpi();
    throw;
  }
}

std::unique_ptr<Communicator> Communicator::split(int32_t color, int32_t key) {
  if (color < 0)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "split: color must be >= 0, found " + std::to_string(color));
  if (is_local()) return std::unique_ptr<Communicator>(new Communicator(host_, config_, MPI_COMM_NULL));  // counts nothing
  const auto names = new_collective("split");
  acquire_mpi(host_);
  try {
    MPI_Comm part = MPI_COMM_NULL;
    {
      Armed armed(*this, config_.timeout_s, names->what, names->stalled_because);
      check_mpi(MPI_Comm_split(comm_, color, key, &part), "split");
    }
    auto child = std::unique_ptr<Communicator>(new Communicator(host_, config_, part));
    child->counters_ = counters_.for_split();
    return child;
  } catch (...) {
    release_mpi();
    throw;
  }
}

void Communicator::check_mpi(int code, const char* operation) const {
  if (code == MPI_SUCCESS) return;
  throw StatusError(KEEL_ERR_IO, std::string(operation) + " failed on rank " + std::to_string(rank_) + " of " +
                                     std::to_string(size_) + ": " + mpi_error_string(code));
}

std::unique_ptr<keel_comm_request> Communicator::new_collective(const char* name) const {
  auto request = std::make_unique<keel_comm_request>();
  request->what = std::string("collective ") + name;
  request->stalled_because = "another rank died or stopped calling it";
  return request;
}

void Communicator::complete_or_hand_out(std::unique_ptr<keel_comm_request> request, keel_comm_request** out) {
  if (out) *out = request.release();
  else complete(*request);
}

void Communicator::complete(keel_comm_request& request) {
  if (request.local) {
    if (!request.local->done) {
      mailbox_.withdraw(request.local);
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                        request.what + ": no matching send was posted in this world of one, so it would wait forever");
    }
    if (!request.local->error.empty())
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, request.what + ": " + request.local->error);
    return;
  }
  if (request.mpi == MPI_REQUEST_NULL) return;  // completed when started
  Armed armed(*this, config_.timeout_s, request.what, request.stalled_because);
  check_mpi(MPI_Wait(&request.mpi, MPI_STATUS_IGNORE), request.what.c_str());
}

void Communicator::run_on_mpi(keel_comm_request& request, bool non_blocking, const char* name,
                              const std::function<int()>& blocking, const std::function<int(MPI_Request*)>& start) {
  if (non_blocking) return check_mpi(start(&request.mpi), name);
  Armed armed(*this, config_.timeout_s, request.what, request.stalled_because);
  check_mpi(blocking(), name);
}

void Communicator::wait(keel_comm_request* request) {
  std::unique_ptr<keel_comm_request> owned(request);
  complete(*owned);
}

void Communicator::end_world(int32_t exit_code, const std::string& reason, bool use_mpi_abort) const {
  // A shell sees only the low 8 bits of a status, and 0 would read as success.
  const int code = exit_code > 0 && exit_code < 256 ? exit_code : 1;
  std::fprintf(stderr, "keel: rank %d of %d: %s\n", world_rank_, world_size_, reason.c_str());
  std::fflush(stderr);
  if (use_mpi_abort) MPI_Abort(MPI_COMM_WORLD, code);  // mpirun then ends every rank
  std::_Exit(code);
}

}  // namespace keel_mpi
