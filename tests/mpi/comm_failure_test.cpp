// A world where one rank fails, for expect_world_failure.sh to watch: every rank must exit
// non-zero, soon, with a message naming the failing rank, instead of hanging in a collective.
//   abort          rank 1 calls abort_world("simulated failure"); the others sit in an all_reduce
//   abort-self     rank 0 calls abort_world (a world of one: no mpirun to end the others)
//   hang T         rank 1 sleeps; the others' all_reduce with timeout_s T must end the world
//   hang-wait T    the same with a non-blocking all_reduce: the wait must end the world
//   exit T         rank 1 leaves without MPI_Finalize; the others' all_reduce must not hang
//   freeze T       rank 1 stops itself (SIGSTOP): its heartbeats stop too, so the others'
//                  timeout must name it as silent (peer_liveness.hpp); hang names none
#include <signal.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "comm_test_support.hpp"

using namespace comm_test;

int main(int argc, char** argv) {
  if (argc < 2) fail(__FILE__, __LINE__, "usage: comm_failure_test abort|abort-self|hang T|exit T|freeze T");
  const std::string mode = argv[1];
  const std::string timeout_s = argc > 2 ? argv[2] : "60";
  const keel_comm_api* api = load_comm_plugin(KEEL_MPI_PLUGIN_PATH);
  void* world = nullptr;
  const std::string config = R"({"plugin": "mpi", "timeout_s": )" + timeout_s + "}";
  CHECK_OK(api->create_world(&kHost, config.c_str(), "comm", &world));
  int32_t rank = -1, size = -1;
  CHECK_OK(api->rank(world, &rank));
  CHECK_OK(api->size(world, &size));
  g_rank = rank, g_size = size;

  const int failing_rank = mode == "abort-self" ? 0 : 1;
  if (rank == failing_rank) {
    if (mode == "abort" || mode == "abort-self") {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the others enter the all_reduce
      api->abort_world(world, 3, "simulated failure");
      fail(__FILE__, __LINE__, "abort_world returned");
    }
    if (mode == "hang" || mode == "hang-wait") std::this_thread::sleep_for(std::chrono::seconds(600));
    if (mode == "exit") _exit(0);
    if (mode == "freeze") raise(SIGSTOP);  // mpirun's SIGKILL still ends a stopped process
  }
  std::vector<float> values(1000, 1.0f);
  keel_comm_request* pending = nullptr;
  CHECK_OK(api->all_reduce(world, values.data(), values.data(), values.size(), fp32(), KEEL_REDUCE_SUM,
                           mode == "hang-wait" ? &pending : nullptr));
  if (pending) CHECK_OK(api->wait(world, pending));
  fail(__FILE__, __LINE__, "all_reduce completed although rank " + std::to_string(failing_rank) + " never called it");
}
