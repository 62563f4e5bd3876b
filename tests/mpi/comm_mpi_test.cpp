// The mpi comm plugin against values computed here in closed form, on every rank of whatever
// world it runs in: `mpirun -np N comm_mpi_test N`, or without a launcher (a world of one).
// Every rank contributes f(rank, i); sums and maxima over ranks have closed forms, so no rank
// needs another's data to know the right answer.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "comm_test_support.hpp"

namespace {

using namespace comm_test;

const keel_comm_api* api;
void* world;
int rank_, size_;

// Exactly representable in fp32 for the sizes used: halves plus integers below 2^20.
float f(int rank, size_t i) { return 0.5f * float(rank + 1) + float(i % 97); }
float sum_f(int size, size_t i) { return 0.25f * float(size * (size + 1)) + float(size) * float(i % 97); }
float g(int rank, size_t i) { return float(rank) * float(i % 5) - 0.25f * float(i % 13); }
float max_g(int size, size_t i) { return float(size - 1) * float(i % 5) - 0.25f * float(i % 13); }

template <typename T, typename Expected>
void check_values(const char* what, const std::vector<T>& got, Expected expected) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected(i))
      fail(__FILE__, __LINE__, std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                                   ", expected " + std::to_string(expected(i)));
}

void test_config() {
  CHECK_OK(api->validate_config(&kHost, R"({"plugin": "mpi", "timeout_s": 12.5})", "comm"));
  CHECK_STATUS(api->validate_config(&kHost, R"({"plugin": "mpi", "timeout": 5})", "comm"), KEEL_ERR_INVALID_CONFIG);
  CHECK(g_last_error.find("comm.timeout: unknown key (did you mean \"timeout_s\"?)") != std::string::npos);
  CHECK_STATUS(api->validate_config(&kHost, R"({"timeout_s": "long"})", "comm"), KEEL_ERR_INVALID_CONFIG);
  CHECK_STATUS(api->validate_config(&kHost, R"({"timeout_s": 0})", "comm"), KEEL_ERR_INVALID_CONFIG);
  void* never = nullptr;
  CHECK_STATUS(api->create_world(&kHost, R"({"timeout_s": -1})", "comm", &never), KEEL_ERR_INVALID_CONFIG);
  CHECK(never == nullptr);
}

void test_all_reduce_sum(size_t n, bool in_place) {
  std::vector<float> send(n), recv(n, -1.0f);
  for (size_t i = 0; i < n; ++i) send[i] = f(rank_, i);
  std::vector<float>& out = in_place ? send : recv;
  CHECK_OK(api->all_reduce(world, send.data(), out.data(), n, fp32(), KEEL_REDUCE_SUM, nullptr));
  check_values(in_place ? "all_reduce sum in place" : "all_reduce sum", out, [](size_t i) { return sum_f(size_, i); });
}

void test_all_reduce_max() {
  const size_t n = 1000;
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = g(rank_, i);
  CHECK_OK(api->all_reduce(world, send.data(), recv.data(), n, fp32(), KEEL_REDUCE_MAX, nullptr));
  check_values("all_reduce max", recv, [](size_t i) { return max_g(size_, i); });
}

void test_all_reduce_int32_and_fp64() {
  const size_t n = 100;
  std::vector<int32_t> ints(n);
  for (size_t i = 0; i < n; ++i) ints[i] = rank_ * 1000 + int32_t(i);
  CHECK_OK(api->all_reduce(world, ints.data(), ints.data(), n, int32(), KEEL_REDUCE_SUM, nullptr));
  check_values("int32 all_reduce sum", ints, [](size_t i) { return 1000 * size_ * (size_ - 1) / 2 + size_ * int32_t(i); });
  for (size_t i = 0; i < n; ++i) ints[i] = rank_ * 1000 - int32_t(i);
  CHECK_OK(api->all_reduce(world, ints.data(), ints.data(), n, int32(), KEEL_REDUCE_MAX, nullptr));
  check_values("int32 all_reduce max", ints, [](size_t i) { return 1000 * (size_ - 1) - int32_t(i); });
  std::vector<double> doubles(n);
  for (size_t i = 0; i < n; ++i) doubles[i] = 1e-3 * (rank_ + 1) + double(i);
  CHECK_OK(api->all_reduce(world, doubles.data(), doubles.data(), n, fp64(), KEEL_REDUCE_MAX, nullptr));
  check_values("fp64 all_reduce max", doubles, [](size_t i) { return 1e-3 * size_ + double(i); });
}

// bf16 travels as 16-bit words and is reduced in fp32, rounded once per combination. Values are
// small multiples of 1/4, so every partial sum is exact in bf16 and the expected bits are known.
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return uint16_t(bits >> 16);  // exact for these values: the low half is zero
}
void test_bf16() {
  const size_t n = 16;
  std::vector<uint16_t> words(n), gathered(n * size_);
  for (size_t i = 0; i < n; ++i) words[i] = to_bf16(0.25f * float(rank_ + 1) * float(i % 4 + 1));
  CHECK_OK(api->all_gather(world, words.data(), gathered.data(), n, bf16(), nullptr));
  check_values("bf16 all_gather", gathered, [](size_t k) {
    return to_bf16(0.25f * float(k / 16 + 1) * float(k % 16 % 4 + 1));
  });
  CHECK_OK(api->all_reduce(world, words.data(), words.data(), n, bf16(), KEEL_REDUCE_SUM, nullptr));
  check_values("bf16 all_reduce sum", words, [](size_t i) {
    return to_bf16(0.25f * float(size_ * (size_ + 1) / 2) * float(i % 4 + 1));
  });
  for (size_t i = 0; i < n; ++i) words[i] = to_bf16(-0.5f * float(rank_) + float(i));
  CHECK_OK(api->all_reduce(world, words.data(), words.data(), n, bf16(), KEEL_REDUCE_MAX, nullptr));
  check_values("bf16 all_reduce max", words, [](size_t i) { return to_bf16(float(i)); });
}

// send holds size blocks of `count`; rank r gets the sum over ranks of block r.
void test_reduce_scatter(size_t count) {
  std::vector<float> send(size_ * count), recv(count, -1.0f);
  for (size_t i = 0; i < send.size(); ++i) send[i] = f(rank_, i);
  CHECK_OK(api->reduce_scatter(world, send.data(), recv.data(), count, fp32(), KEEL_REDUCE_SUM, nullptr));
  check_values("reduce_scatter sum", recv, [count](size_t j) { return sum_f(size_, rank_ * count + j); });
}

void test_all_gather(size_t count) {
  std::vector<float> send(count), recv(size_ * count, -1.0f);
  for (size_t j = 0; j < count; ++j) send[j] = float(rank_ * 100 + j);
  CHECK_OK(api->all_gather(world, send.data(), recv.data(), count, fp32(), nullptr));
  check_values("all_gather", recv, [count](size_t i) { return float((i / count) * 100 + i % count); });
}

void test_broadcast_from_last_rank() {
  const int root = size_ - 1;
  std::vector<float> buffer(33, -1.0f);
  if (rank_ == root)
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = 42.0f + float(i);
  CHECK_OK(api->broadcast(world, buffer.data(), buffer.size(), fp32(), root, nullptr));
  check_values("broadcast", buffer, [](size_t i) { return 42.0f + float(i); });
}

// Each rank sends to the next and receives from the previous, around the ring.
void test_ring() {
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  std::vector<float> out(50), in(50, -1.0f);
  for (size_t i = 0; i < out.size(); ++i) out[i] = f(rank_, i);
  keel_comm_request* receiving = nullptr;
  CHECK_OK(api->recv(world, in.data(), in.size(), fp32(), previous, 7, &receiving));
  CHECK_OK(api->send(world, out.data(), out.size(), fp32(), next, 7, nullptr));
  CHECK_OK(api->wait(world, receiving));
  check_values("ring (recv posted first)", in, [previous](size_t i) { return f(previous, i); });
  if (size_ == 1) return;  // blocking send before recv to oneself has no partner to match it
  // Blocking both ways: even ranks send first, odd ranks receive first.
  std::fill(in.begin(), in.end(), -1.0f);
  if (rank_ % 2 == 0) {
    CHECK_OK(api->send(world, out.data(), out.size(), fp32(), next, 8, nullptr));
    CHECK_OK(api->recv(world, in.data(), in.size(), fp32(), previous, 8, nullptr));
  } else {
    CHECK_OK(api->recv(world, in.data(), in.size(), fp32(), previous, 8, nullptr));
    CHECK_OK(api->send(world, out.data(), out.size(), fp32(), next, 8, nullptr));
  }
  check_values("ring (blocking)", in, [previous](size_t i) { return f(previous, i); });
}

// Several operations in flight at once while this rank computes, then waited in another order.
void test_non_blocking_overlap() {
  const size_t n = 1 << 18, count = 7;
  std::vector<float> reduced(n), scattered_in(size_ * count), scattered(count), gathered(size_ * count);
  std::vector<float> gathered_in(count), broadcast(16, -1.0f), ring_in(9, -1.0f), ring_out(9);
  for (size_t i = 0; i < n; ++i) reduced[i] = f(rank_, i);
  for (size_t i = 0; i < scattered_in.size(); ++i) scattered_in[i] = g(rank_, i);
  for (size_t j = 0; j < count; ++j) gathered_in[j] = float(rank_ * 100 + j);
  for (size_t i = 0; i < ring_out.size(); ++i) ring_out[i] = f(rank_, i + 5);
  if (rank_ == 0) std::fill(broadcast.begin(), broadcast.end(), 3.5f);
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  keel_comm_request *r_reduce, *r_scatter, *r_gather, *r_broadcast, *r_recv, *r_send;
  CHECK_OK(api->all_reduce(world, reduced.data(), reduced.data(), n, fp32(), KEEL_REDUCE_SUM, &r_reduce));
  CHECK_OK(api->recv(world, ring_in.data(), ring_in.size(), fp32(), previous, 3, &r_recv));
  CHECK_OK(api->reduce_scatter(world, scattered_in.data(), scattered.data(), count, fp32(), KEEL_REDUCE_MAX, &r_scatter));
  CHECK_OK(api->all_gather(world, gathered_in.data(), gathered.data(), count, fp32(), &r_gather));
  CHECK_OK(api->broadcast(world, broadcast.data(), broadcast.size(), fp32(), 0, &r_broadcast));
  CHECK_OK(api->send(world, ring_out.data(), ring_out.size(), fp32(), next, 3, &r_send));
  double local_work = 0;
  for (int i = 1; i < 2000000; ++i) local_work += std::sqrt(double(i));
  CHECK(local_work > 0);
  for (keel_comm_request* request : {r_send, r_broadcast, r_gather, r_scatter, r_recv, r_reduce})
    CHECK_OK(api->wait(world, request));
  check_values("non-blocking all_reduce", reduced, [](size_t i) { return sum_f(size_, i); });
  check_values("non-blocking reduce_scatter max", scattered, [count](size_t j) { return max_g(size_, rank_ * count + j); });
  check_values("non-blocking all_gather", gathered, [count](size_t i) { return float((i / count) * 100 + i % count); });
  check_values("non-blocking broadcast", broadcast, [](size_t) { return 3.5f; });
  check_values("non-blocking ring", ring_in, [previous](size_t i) { return f(previous, i + 5); });
}

// Even and odd ranks form two groups, ordered by descending world rank (key = -rank).
void test_split_even_odd() {
  void* group = nullptr;
  const int parity = rank_ % 2;
  CHECK_OK(api->split(world, parity, -rank_, &group));
  int32_t group_rank = -1, group_size = -1;
  CHECK_OK(api->rank(group, &group_rank));
  CHECK_OK(api->size(group, &group_size));
  const int largest = (size_ - 1) % 2 == parity ? size_ - 1 : size_ - 2;  // the largest world rank of this parity
  CHECK(group_size == (size_ - parity + 1) / 2);
  CHECK(group_rank == (largest - rank_) / 2);
  std::vector<int32_t> sum(1, rank_), members(group_size, -1), mine(1, rank_);
  CHECK_OK(api->all_reduce(group, sum.data(), sum.data(), 1, int32(), KEEL_REDUCE_SUM, nullptr));
  int32_t expected_sum = 0;
  for (int r = parity; r < size_; r += 2) expected_sum += r;
  check_values("split all_reduce", sum, [expected_sum](size_t) { return expected_sum; });
  CHECK_OK(api->all_gather(group, mine.data(), members.data(), 1, int32(), nullptr));
  check_values("split all_gather (key order)", members, [largest](size_t j) { return int32_t(largest - 2 * j); });
  api->destroy(group);
}

// Bytes by comm.h's convention, per operation, on a communicator used for nothing else.
void test_counters() {
  void* c = nullptr;
  CHECK_OK(api->split(world, 0, rank_, &c));
  keel_comm_counters counters{};
  counters.struct_size = sizeof counters;
  CHECK_OK(api->counters(c, &counters));
  for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op) CHECK(counters.calls[op] == 0 && counters.bytes[op] == 0);
  const uint64_t p = size_;
  std::vector<float> a(10, 1.0f), blocks(size_ * 7, 1.0f), block(7, 1.0f), five(5, 1.0f), three(3, 1.0f), in(3);
  std::vector<int32_t> ints(10, 1);
  keel_comm_request *pending, *receiving;
  CHECK_OK(api->all_reduce(c, a.data(), a.data(), 10, fp32(), KEEL_REDUCE_SUM, nullptr));
  CHECK_OK(api->all_reduce(c, ints.data(), ints.data(), 10, int32(), KEEL_REDUCE_SUM, &pending));
  CHECK_OK(api->wait(c, pending));
  CHECK_OK(api->reduce_scatter(c, blocks.data(), block.data(), 7, fp32(), KEEL_REDUCE_SUM, nullptr));
  CHECK_OK(api->all_gather(c, block.data(), blocks.data(), 7, fp32(), nullptr));
  CHECK_OK(api->broadcast(c, five.data(), 5, fp32(), 0, nullptr));
  CHECK_OK(api->recv(c, in.data(), 3, fp32(), (rank_ + size_ - 1) % size_, 0, &receiving));
  CHECK_OK(api->send(c, three.data(), 3, fp32(), (rank_ + 1) % size_, 0, nullptr));
  CHECK_OK(api->wait(c, receiving));
  CHECK_OK(api->barrier(c));
  CHECK_OK(api->counters(c, &counters));
  const uint64_t calls[KEEL_COMM_OP_COUNT] = {2, 1, 1, 1, 1, 1, 1};
  // comm.h's convention (the ZeRO paper's): all_reduce 2n, reduce_scatter its n input bytes,
  // all_gather its n output bytes, broadcast/send/recv n; a group of one moves nothing.
  const uint64_t moved = p > 1 ? 1 : 0;
  const uint64_t bytes[KEEL_COMM_OP_COUNT] = {
      moved * 2 * (2 * 40),              // all_reduce of n = 40 bytes (fp32 and int32), twice
      moved * 28 * p,                    // reduce_scatter of n = 28p input bytes
      moved * 28 * p,                    // all_gather of n = 28p output bytes
      moved * 20,                        // broadcast of 20 bytes, on every rank
      moved * 12, moved * 12, 0};        // send and recv of 12 bytes; barrier moves nothing
  for (int op = 0; op < KEEL_COMM_OP_COUNT; ++op)
    if (counters.calls[op] != calls[op] || counters.bytes[op] != bytes[op])
      fail(__FILE__, __LINE__, "counters for op " + std::to_string(op) + ": " + std::to_string(counters.calls[op]) +
                                   " calls and " + std::to_string(counters.bytes[op]) + " bytes, expected " +
                                   std::to_string(calls[op]) + " and " + std::to_string(bytes[op]));
  api->destroy(c);
}

// all_to_all_v against a naive reference: rank s sends rank d count(s, d) elements valued
// 1000 s + 100 d + i, uneven with zeros, rank 1 sending nothing; blocking, then non-blocking
// with the counters' bytes (those sent to the other ranks) checked on a fresh communicator.
size_t a2a_count(int from, int to) { return from == 1 ? 0 : size_t((3 * from + 5 * to + 1) % 4) * 250; }
float a2a_value(int from, int to, size_t i) { return float(1000 * from + 100 * to) + float(i % 100); }
void test_all_to_all_v() {
  std::vector<size_t> send_counts, recv_counts;
  std::vector<float> send, expected;
  uint64_t to_others = 0;
  for (int peer = 0; peer < size_; ++peer) {
    send_counts.push_back(a2a_count(rank_, peer));
    recv_counts.push_back(a2a_count(peer, rank_));
    for (size_t i = 0; i < a2a_count(rank_, peer); ++i) send.push_back(a2a_value(rank_, peer, i));
    for (size_t i = 0; i < a2a_count(peer, rank_); ++i) expected.push_back(a2a_value(peer, rank_, i));
    if (peer != rank_) to_others += a2a_count(rank_, peer) * sizeof(float);
  }
  void* c = nullptr;
  CHECK_OK(api->split(world, 0, rank_, &c));
  std::vector<float> recv(expected.size(), -1.0f);
  CHECK_OK(api->all_to_all_v(c, send.data(), send_counts.data(), recv.data(), recv_counts.data(), fp32(), nullptr));
  check_values("all_to_all_v", recv, [&](size_t i) { return expected[i]; });
  std::fill(recv.begin(), recv.end(), -1.0f);
  keel_comm_request* pending = nullptr;
  CHECK_OK(api->all_to_all_v(c, send.data(), send_counts.data(), recv.data(), recv_counts.data(), fp32(), &pending));
  CHECK_OK(api->wait(c, pending));
  check_values("non-blocking all_to_all_v", recv, [&](size_t i) { return expected[i]; });
  keel_comm_counters counters{};
  counters.struct_size = sizeof counters;
  CHECK_OK(api->counters(c, &counters));
  const uint64_t moved = size_ > 1 ? 1 : 0;
  if (counters.all_to_all_calls != 2 || counters.all_to_all_bytes != moved * 2 * to_others)
    fail(__FILE__, __LINE__, "all_to_all_v counters: " + std::to_string(counters.all_to_all_calls) + " calls and " +
                                 std::to_string(counters.all_to_all_bytes) + " bytes, expected 2 and " +
                                 std::to_string(moved * 2 * to_others));
  api->destroy(c);
}

// Refusals happen before any communication, identically on every rank, so nobody waits.
void test_refusals() {
  std::vector<float> a(8 * size_), b(8 * size_);
  const keel_dtype fp16{KEEL_DTYPE_FLOAT, 16, 1};  // no comm moves half precision
  CHECK_STATUS(api->all_reduce(world, a.data(), b.data(), 8, fp16, KEEL_REDUCE_SUM, nullptr), KEEL_ERR_UNIMPLEMENTED);
  CHECK(g_last_error.find("bits 16") != std::string::npos);
  CHECK_STATUS(api->all_reduce(world, a.data(), b.data(), 8, fp32(), 7, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->all_reduce(world, a.data(), a.data() + 1, 4, fp32(), KEEL_REDUCE_SUM, nullptr),
               KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->reduce_scatter(world, a.data(), a.data(), 8, fp32(), KEEL_REDUCE_SUM, nullptr),
               KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->broadcast(world, a.data(), 8, fp32(), size_, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->send(world, a.data(), 8, fp32(), -1, 0, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->recv(world, a.data(), 8, fp32(), 0, -2, nullptr), KEEL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(api->all_gather(world, nullptr, b.data(), 8, fp32(), nullptr), KEEL_ERR_INVALID_ARGUMENT);
  void* never = nullptr;
  CHECK_STATUS(api->split(world, -1, 0, &never), KEEL_ERR_INVALID_ARGUMENT);
  keel_comm_counters too_small{};
  CHECK_STATUS(api->counters(world, &too_small), KEEL_ERR_INVALID_ARGUMENT);

  // all_to_all_v: counts MPI-3's ints cannot carry, a total whose bytes overflow, NULL counts.
  std::vector<size_t> beyond_int(size_, size_t(INT_MAX) / size_ + 1), fits(size_, 1);
  CHECK_STATUS(api->all_to_all_v(world, a.data(), beyond_int.data(), b.data(), beyond_int.data(), fp32(), nullptr),
               KEEL_ERR_UNIMPLEMENTED);
  const std::string total = std::to_string(size_ * (size_t(INT_MAX) / size_ + 1));
  if (g_last_error.find("all_to_all_v: send holds " + total + " elements, beyond MPI's int counts") == std::string::npos)
    fail(__FILE__, __LINE__, "all_to_all_v int refusal: \"" + g_last_error + "\"");
  std::vector<size_t> overflowing(size_, 1);
  overflowing[0] = SIZE_MAX / 2;
  if (size_ > 1) overflowing[1] = SIZE_MAX / 2;
  else fits[0] = overflowing[0];  // the self block must agree
  CHECK_STATUS(api->all_to_all_v(world, a.data(), overflowing.data(), b.data(), fits.data(), fp32(), nullptr),
               KEEL_ERR_INVALID_ARGUMENT);
  CHECK(g_last_error.find("send_counts overflow") != std::string::npos);
  CHECK_STATUS(api->all_to_all_v(world, a.data(), nullptr, b.data(), fits.data(), fp32(), nullptr),
               KEEL_ERR_INVALID_ARGUMENT);
  CHECK(g_last_error.find("send_counts is NULL (expected " + std::to_string(size_) + " counts") != std::string::npos);
}

// An error inside MPI (a message longer than its receive buffer) comes back as a keel error
// naming the operation and the rank, with MPI's own words, instead of aborting the process.
void test_mpi_error_is_returned() {
  // OpenMPI's self transport (mpirun -np 1) truncates silently, without MPI_ERR_TRUNCATE.
  if (size_ == 1 && std::getenv("OMPI_COMM_WORLD_SIZE")) return;
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  std::vector<float> out(10, 1.0f), in(5);
  keel_comm_request* receiving = nullptr;
  CHECK_OK(api->recv(world, in.data(), in.size(), fp32(), previous, 9, &receiving));
  CHECK_OK(api->send(world, out.data(), out.size(), fp32(), next, 9, nullptr));
  CHECK(api->wait(world, receiving) != KEEL_OK);
  if (rank_ == 0) std::printf("the truncation error reads: %s\n", g_last_error.c_str());
  const std::string expected = "recv from rank " + std::to_string(previous) + " (tag 9)";
  if (g_last_error.find(expected) == std::string::npos || g_last_error.find("truncat") == std::string::npos)
    fail(__FILE__, __LINE__, "truncation error message: \"" + g_last_error + "\"");
}

}  // namespace

// comm.h: one thread per communicator at a time. Rank 0 blocks one thread in a receive that
// rank 1 answers only after a second; meanwhile a second thread's barrier on the same
// communicator must be refused with the rule, not enter MPI beside the first.
void test_second_thread_refused() {
  if (size_ < 2) return;
  const keel_dtype i32{KEEL_DTYPE_INT, 32, 1};
  int32_t word = 0;
  if (rank_ == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    word = 42;
    CHECK_OK(api->send(world, &word, 1, i32, 0, 7, nullptr));
  } else if (rank_ == 0) {
    std::thread receiver([&] { CHECK_OK(api->recv(world, &word, 1, i32, 1, 7, nullptr)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_STATUS(api->barrier(world), KEEL_ERR_INVALID_ARGUMENT);
    CHECK(g_last_error.find("another thread is using this communicator") != std::string::npos);
    receiver.join();
    CHECK(word == 42);
  }
  CHECK_OK(api->barrier(world));
}

int main(int argc, char** argv) {
  api = load_comm_plugin(KEEL_MPI_PLUGIN_PATH);
  test_config();
  CHECK_OK(api->create_world(&kHost, R"({"plugin": "mpi", "timeout_s": 60})", "comm", &world));
  int32_t r = -1, s = -1;
  CHECK_OK(api->rank(world, &r));
  CHECK_OK(api->size(world, &s));
  g_rank = rank_ = r, g_size = size_ = s;
  if (argc > 1 && s != std::atoi(argv[1]))
    fail(__FILE__, __LINE__, "world size " + std::to_string(s) + ", expected " + argv[1]);
  CHECK(0 <= r && r < s);

  test_all_reduce_sum(1000, false);
  test_all_reduce_sum(1 << 20, true);  // 4 MiB: large enough for MPI's pipelined protocols
  test_all_reduce_max();
  test_all_reduce_int32_and_fp64();
  test_bf16();
  test_reduce_scatter(7);
  test_all_gather(7);
  test_broadcast_from_last_rank();
  test_ring();
  test_non_blocking_overlap();
  test_split_even_odd();
  test_counters();
  test_all_to_all_v();
  test_refusals();
  test_second_thread_refused();
  test_mpi_error_is_returned();
  CHECK_OK(api->barrier(world));
  api->destroy(world);
  std::printf("rank %d of %d: all mpi comm checks passed\n", r, s);
  return 0;
}
