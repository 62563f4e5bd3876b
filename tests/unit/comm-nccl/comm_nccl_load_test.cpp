// The nccl plugin loads without a GPU, an MPI library or a launcher: its table is ABI 0.8's with
// every slot and 0.19's all_to_all_v, its config is validated with JSON paths, create_world
// refuses (a device comm needs its backend), and create_world_on refuses a backend whose memory
// is not on a CUDA device.
// Usage: comm_nccl_load_test PATH/libkeel-nccl.so
#include "nccl_test_support.hpp"

using namespace nccl_test;

int main(int argc, char** argv) {
  if (argc != 2) fail(__FILE__, __LINE__, "usage: comm_nccl_load_test PATH/libkeel-nccl.so");
  const keel_comm_api* api = load_nccl_plugin(argv[1]);
  CHECK(KEEL_HAS_SLOT(api, all_to_all_v));  // appended in 0.19

  CHECK_OK(api->validate_config(&kHost, R"({"plugin": "nccl", "timeout_s": 30})", "comm"));
  CHECK_REFUSED(api->validate_config(&kHost, R"({"plugin": "nccl", "timeout": 30})", "comm"), KEEL_ERR_INVALID_CONFIG,
                "comm.timeout: unknown key (did you mean \"timeout_s\"?)");
  CHECK_REFUSED(api->validate_config(&kHost, R"({"plugin": "nccl", "timeout_s": -1})", "comm"),
                KEEL_ERR_INVALID_CONFIG, "comm.timeout_s: expected a value in");
  CHECK_REFUSED(api->validate_config(&kHost, R"({"plugin": "nccl", "timeout_s": "5"})", "comm"),
                KEEL_ERR_INVALID_CONFIG, "comm.timeout_s");

  void* comm = nullptr;
  CHECK_REFUSED(api->create_world(&kHost, R"({"plugin": "nccl"})", "comm", &comm), KEEL_ERR_UNIMPLEMENTED,
                "the nccl comm needs the backend (create_world_on, ABI 0.8)");
  CHECK(comm == nullptr);

  const keel_backend_api backend = fake_backend_api();
  FakeBackend on_cpu{{KEEL_DEVICE_CPU, 0}, nullptr};
  CHECK_REFUSED(api->create_world_on(&kHost, R"({"plugin": "nccl"})", "comm", &backend, &on_cpu, &comm),
                KEEL_ERR_UNIMPLEMENTED, "backend's memory is on cpu (KEEL_DEVICE_CPU)");
  FakeBackend on_ext{{KEEL_DEVICE_EXT, 0}, nullptr};
  CHECK_REFUSED(api->create_world_on(&kHost, R"({"plugin": "nccl"})", "comm", &backend, &on_ext, &comm),
                KEEL_ERR_UNIMPLEMENTED, "KEEL_DEVICE_EXT");
  CHECK_REFUSED(api->create_world_on(&kHost, R"({"plugin": "nccl"})", "comm", nullptr, nullptr, &comm),
                KEEL_ERR_INVALID_ARGUMENT, "the backend is NULL");
  // A CUDA backend built before 0.8 (a table without the queue slot) cannot be ordered against.
  keel_backend_api old_backend = backend;
  old_backend.struct_size = offsetof(keel_backend_api, probe);
  FakeBackend on_cuda{{KEEL_DEVICE_CUDA, 0}, nullptr};
  CHECK_REFUSED(api->create_world_on(&kHost, R"({"plugin": "nccl"})", "comm", &old_backend, &on_cuda, &comm),
                KEEL_ERR_UNIMPLEMENTED, "no queue slot");
  CHECK(comm == nullptr);
  std::printf("comm_nccl_load_test: ok\n");
  return 0;
}
