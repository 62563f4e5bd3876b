// The nccl plugin on one GPU, a world of one (no launcher): every collective on device buffers
// in fp32 and bf16 (and int32, fp64 where comm.h asks for them) against results computed on the
// host, point-to-point and all_to_all_v to itself, split, barrier, reach and counters. The backend is a fake
// table with a stream of its own, so the test needs no CUDA backend plugin.
// Without a CUDA device it prints "skipped: no CUDA device (...)" and exits 77 (ctest's skip).
// Usage: comm_nccl_gpu_test PATH/libkeel-nccl.so
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "nccl_test_support.hpp"

using namespace nccl_test;

namespace {

constexpr int kSkipped = 77;

#define CHECK_CUDA(call)                                                                                       \
  do {                                                                                                         \
    cudaError_t error_ = (call);                                                                               \
    if (error_ != cudaSuccess) ::nccl_test::fail(__FILE__, __LINE__, std::string(#call) + ": " + cudaGetErrorString(error_)); \
  } while (0)

// bf16 as the upper half of an fp32, rounded to nearest even (what a backend stores).
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* device = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// The device buffer's contents once the stream has run everything queued before.
template <typename T>
std::vector<T> to_host(const T* device, size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
void check_equal(const std::vector<T>& got, const std::vector<T>& expected, const char* what) {
  CHECK(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i]))
      fail(__FILE__, __LINE__, std::string(what) + ": element " + std::to_string(i) + " is " +
                                   std::to_string(static_cast<double>(got[i])) + ", expected " +
                                   std::to_string(static_cast<double>(expected[i])));
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = scale * (static_cast<float>(i % 97) - 48.0f) / 7.0f;
  return values;
}

void test_fp32_collectives(const keel_comm_api* api, void* comm, cudaStream_t stream) {
  const size_t n = 1000;
  const std::vector<float> values = ramp(n, 1.0f);
  float* send = to_device(values);
  float* recv = to_device(std::vector<float>(n, -1.0f));
  // In a world of one the sum and the maximum over ranks are the values themselves.
  CHECK_OK(api->all_reduce(comm, send, recv, n, fp32(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(recv, n, stream), values, "all_reduce fp32 sum");
  CHECK_OK(api->all_reduce(comm, send, send, n, fp32(), KEEL_REDUCE_MAX, nullptr));  // in place
  check_equal(to_host(send, n, stream), values, "all_reduce fp32 max in place");
  keel_comm_request* request = nullptr;
  CHECK_OK(api->all_gather(comm, send, recv, n, fp32(), &request));
  CHECK_OK(api->wait(comm, request));
  check_equal(to_host(recv, n, stream), values, "all_gather fp32");
  CHECK_OK(api->reduce_scatter(comm, send, recv, n, fp32(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(recv, n, stream), values, "reduce_scatter fp32");
  CHECK_OK(api->broadcast(comm, send, n, fp32(), 0, nullptr));
  check_equal(to_host(send, n, stream), values, "broadcast fp32");
  // Ordering: a copy the "backend" queues after the collective sees its result.
  std::vector<float> twice(n);
  for (size_t i = 0; i < n; ++i) twice[i] = 2 * values[i];
  float* other = to_device(twice);
  CHECK_OK(api->all_reduce(comm, other, recv, n, fp32(), KEEL_REDUCE_SUM, nullptr));
  CHECK_CUDA(cudaMemcpyAsync(send, recv, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  check_equal(to_host(send, n, stream), twice, "a copy queued after all_reduce");
  CHECK_CUDA(cudaFree(send));
  CHECK_CUDA(cudaFree(recv));
  CHECK_CUDA(cudaFree(other));
}

void test_bf16_collectives(const keel_comm_api* api, void* comm, cudaStream_t stream) {
  const size_t n = 777;
  std::vector<uint16_t> values(n);
  const std::vector<float> source = ramp(n, 3.0f);
  for (size_t i = 0; i < n; ++i) values[i] = to_bf16(source[i]);
  uint16_t* send = to_device(values);
  uint16_t* recv = to_device(std::vector<uint16_t>(n, 0));
  CHECK_OK(api->all_reduce(comm, send, recv, n, bf16(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(recv, n, stream), values, "all_reduce bf16 sum");
  CHECK_OK(api->all_reduce(comm, send, recv, n, bf16(), KEEL_REDUCE_MAX, nullptr));
  check_equal(to_host(recv, n, stream), values, "all_reduce bf16 max");
  CHECK_OK(api->all_gather(comm, send, recv, n, bf16(), nullptr));
  check_equal(to_host(recv, n, stream), values, "all_gather bf16");
  CHECK_OK(api->reduce_scatter(comm, send, recv, n, bf16(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(recv, n, stream), values, "reduce_scatter bf16");
  CHECK_OK(api->broadcast(comm, recv, n, bf16(), 0, nullptr));
  check_equal(to_host(recv, n, stream), values, "broadcast bf16");
  CHECK(std::fabs(from_bf16(values[5]) - source[5]) <= std::fabs(source[5]) / 128);
  CHECK_CUDA(cudaFree(send));
  CHECK_CUDA(cudaFree(recv));
}

void test_int32_and_fp64(const keel_comm_api* api, void* comm, cudaStream_t stream) {
  const std::vector<int32_t> words = {7, -3, 1 << 30, 0, 42};
  int32_t* word_buffer = to_device(words);
  CHECK_OK(api->all_reduce(comm, word_buffer, word_buffer, words.size(), int32(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(word_buffer, words.size(), stream), words, "all_reduce int32");
  const std::vector<double> doubles = {1.0 / 3, -2.5e300, 7.0};
  double* double_buffer = to_device(doubles);
  double* gathered = to_device(std::vector<double>(doubles.size(), 0.0));
  CHECK_OK(api->all_gather(comm, double_buffer, gathered, doubles.size(), fp64(), nullptr));
  check_equal(to_host(gathered, doubles.size(), stream), doubles, "all_gather fp64");
  CHECK_REFUSED(api->all_reduce(comm, double_buffer, gathered, 1, int64(), KEEL_REDUCE_SUM, nullptr),
                KEEL_ERR_UNIMPLEMENTED, "expected fp32, bf16, int32 or fp64");
  CHECK_CUDA(cudaFree(word_buffer));
  CHECK_CUDA(cudaFree(double_buffer));
  CHECK_CUDA(cudaFree(gathered));
}

void test_send_to_itself(const keel_comm_api* api, void* comm, cudaStream_t stream) {
  const std::vector<float> first = ramp(64, 1.0f), second = ramp(64, -2.0f);
  float* a = to_device(first);
  float* b = to_device(second);
  float* into = to_device(std::vector<float>(64, 0.0f));
  // recv posted first, then the send that fills it; then a send kept until its recv comes.
  keel_comm_request* posted = nullptr;
  CHECK_OK(api->recv(comm, into, 64, fp32(), 0, 5, &posted));
  CHECK_OK(api->send(comm, a, 64, fp32(), 0, 5, nullptr));
  CHECK_OK(api->wait(comm, posted));
  check_equal(to_host(into, 64, stream), first, "recv posted before its send");
  CHECK_OK(api->send(comm, b, 64, fp32(), 0, 6, nullptr));
  CHECK_CUDA(cudaMemsetAsync(b, 0, 64 * sizeof(float), stream));  // the send took a copy
  CHECK_OK(api->recv(comm, into, 64, fp32(), 0, 6, nullptr));
  check_equal(to_host(into, 64, stream), second, "recv after its send");
  CHECK_REFUSED(api->recv(comm, into, 64, fp32(), 0, 7, nullptr), KEEL_ERR_INVALID_ARGUMENT, "would wait forever");
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(into));
}

// A world of one: its one block goes to itself (a device copy on the stream), bf16 as it is; a
// recv count that disagrees with its own send count is refused with both numbers.
void test_all_to_all_v_to_itself(const keel_comm_api* api, void* comm, cudaStream_t stream) {
  const std::vector<float> values = ramp(37, 0.5f);
  float* send = to_device(values);
  float* recv = to_device(std::vector<float>(37, -1.0f));
  const size_t count = 37, other = 36;
  CHECK_OK(api->all_to_all_v(comm, send, &count, recv, &count, fp32(), nullptr));
  check_equal(to_host(recv, 37, stream), values, "all_to_all_v fp32 to itself");
  CHECK_REFUSED(api->all_to_all_v(comm, send, &count, recv, &other, fp32(), nullptr), KEEL_ERR_INVALID_ARGUMENT,
                "rank 0 sends itself 37 elements (send_counts[0]) but expects 36");
  std::vector<uint16_t> words(count);
  for (size_t i = 0; i < count; ++i) words[i] = to_bf16(values[i]);
  uint16_t* send_bf16 = to_device(words);
  uint16_t* recv_bf16 = to_device(std::vector<uint16_t>(count, 0));
  keel_comm_request* request = nullptr;
  CHECK_OK(api->all_to_all_v(comm, send_bf16, &count, recv_bf16, &count, bf16(), &request));
  CHECK_OK(api->wait(comm, request));
  check_equal(to_host(recv_bf16, count, stream), words, "all_to_all_v bf16 to itself");
  for (void* buffer : {static_cast<void*>(send), static_cast<void*>(recv), static_cast<void*>(send_bf16),
                       static_cast<void*>(recv_bf16)})
    CHECK_CUDA(cudaFree(buffer));
}

void test_split_barrier_reach_counters(const keel_comm_api* api, void* comm, cudaStream_t stream, int device) {
  void* part = nullptr;
  CHECK_OK(api->split(comm, 0, 0, &part));
  int32_t rank = -1, size = -1;
  CHECK_OK(api->rank(part, &rank));
  CHECK_OK(api->size(part, &size));
  CHECK(rank == 0 && size == 1);
  float* x = to_device(std::vector<float>{1.5f, -2.0f});
  CHECK_OK(api->all_reduce(part, x, x, 2, fp32(), KEEL_REDUCE_SUM, nullptr));
  check_equal(to_host(x, 2, stream), std::vector<float>{1.5f, -2.0f}, "all_reduce on a split communicator");
  CHECK_OK(api->barrier(part));
  CHECK_OK(api->barrier(comm));
  api->destroy(part);
  CHECK_CUDA(cudaFree(x));

  int32_t reach = -1;
  CHECK_OK(api->reaches(comm, keel_device{KEEL_DEVICE_CUDA, device}, &reach));
  CHECK(reach == KEEL_COMM_REACH_QUEUED);
  CHECK_OK(api->reaches(comm, keel_device{KEEL_DEVICE_CUDA, device + 1}, &reach));
  CHECK(reach == KEEL_COMM_REACH_NONE);
  CHECK_OK(api->reaches(comm, keel_device{KEEL_DEVICE_CPU, 0}, &reach));
  CHECK(reach == KEEL_COMM_REACH_NONE);

  keel_comm_counters counters{};
  counters.struct_size = sizeof counters;
  CHECK_OK(api->counters(comm, &counters));
  // The calls of the tests before, the split one's included; in a world of one nothing moves.
  CHECK(counters.calls[KEEL_COMM_ALL_REDUCE] == 3 + 2 + 1 + 1);  // fp32, bf16, int32, split
  CHECK(counters.calls[KEEL_COMM_BARRIER] == 2);
  CHECK(counters.calls[KEEL_COMM_SEND] == 2 && counters.calls[KEEL_COMM_RECV] == 2);
  for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op) CHECK(counters.bytes[op] == 0);
  CHECK(counters.all_to_all_calls == 2 && counters.all_to_all_bytes == 0);  // the refused call is not counted
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail(__FILE__, __LINE__, "usage: comm_nccl_gpu_test PATH/libkeel-nccl.so");
  int devices = 0;
  const cudaError_t probed = cudaGetDeviceCount(&devices);
  if (probed != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device (%s)\n",
                probed != cudaSuccess ? cudaGetErrorString(probed) : "cudaGetDeviceCount found 0");
    return kSkipped;
  }
  const keel_comm_api* api = load_nccl_plugin(argv[1]);
  const int device = 0;
  CHECK_CUDA(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const keel_backend_api backend = fake_backend_api();
  FakeBackend cuda{{KEEL_DEVICE_CUDA, device}, stream};
  void* comm = nullptr;
  CHECK_OK(api->create_world_on(&kHost, R"({"plugin": "nccl", "timeout_s": 60})", "comm", &backend, &cuda, &comm));
  int32_t rank = -1, size = -1;
  CHECK_OK(api->rank(comm, &rank));
  CHECK_OK(api->size(comm, &size));
  CHECK(rank == 0 && size == 1);

  test_fp32_collectives(api, comm, stream);
  test_bf16_collectives(api, comm, stream);
  test_int32_and_fp64(api, comm, stream);
  test_send_to_itself(api, comm, stream);
  test_all_to_all_v_to_itself(api, comm, stream);
  test_split_barrier_reach_counters(api, comm, stream, device);

  api->destroy(comm);
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("comm_nccl_gpu_test: ok\n");
  return 0;
}
