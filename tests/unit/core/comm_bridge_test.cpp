// The bridged communicator (mesh/comm_bridge.h) against a fake comm of two "ranks" whose
// results are closed-form (all_reduce doubles, reduce_scatter adds the two blocks, all_gather
// repeats) and a fake backend that records its synchronisations and copies: a QUEUED comm is
// handed out unchanged, a SYNCED one sees the caller's buffers after the queue drained, and a
// NONE one sees only staging buffers, with every result delivered to the caller's buffer (for a
// non-blocking call, at wait).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "host/errors.h"
#include "mesh/comm_bridge.h"

namespace {

constexpr keel_dtype kFloat = {KEEL_DTYPE_FLOAT, 32, 1};

struct FakeBackend {
  int synchronizations = 0, copies_in = 0, copies_out = 0;
  std::set<const void*> staging;  // alloc_host and alloc results
  keel_device device{KEEL_DEVICE_EXT, 0};

  static FakeBackend& of(void* obj) { return *static_cast<FakeBackend*>(obj); }
  static keel_status get_device(void* obj, keel_device* out) {
    *out = of(obj).device;
    return KEEL_OK;
  }
  static keel_status alloc(void* obj, size_t bytes, void** out) {
    *out = std::calloc(1, bytes);
    of(obj).staging.insert(*out);
    return KEEL_OK;
  }
  static void release(void* obj, void* ptr) {
    of(obj).staging.erase(ptr);
    std::free(ptr);
  }
  static keel_status copy(void* obj, void* dst, const void* src, size_t bytes, int32_t direction) {
    std::memcpy(dst, src, bytes);
    if (direction == KEEL_COPY_DEVICE_TO_HOST) ++of(obj).copies_out;
    if (direction == KEEL_COPY_HOST_TO_DEVICE) ++of(obj).copies_in;
    return KEEL_OK;
  }
  static keel_status synchronize(void* obj) {
    ++of(obj).synchronizations;
    return KEEL_OK;
  }
  static keel_backend_api table() {
    keel_backend_api api{};
    api.struct_size = sizeof(api);
    api.device = get_device;
    api.alloc = alloc;
    api.free_memory = release;
    api.copy = copy;
    api.synchronize = synchronize;
    api.alloc_host = alloc;
    api.free_host = release;
    return api;
  }
};

// Two ranks' worth of closed-form results, computed from this rank's buffer alone.
struct FakeComm {
  int32_t reach = KEEL_COMM_REACH_NONE;
  std::vector<const void*> seen;  // every buffer the plugin was handed
  int destroyed = 0;
  FakeComm* parent = nullptr;

  static FakeComm& of(void* obj) { return *static_cast<FakeComm*>(obj); }
  static keel_status rank(void*, int32_t* out) {
    *out = 0;
    return KEEL_OK;
  }
  static keel_status size(void*, int32_t* out) {
    *out = 2;
    return KEEL_OK;
  }
  static keel_status split(void* obj, int32_t, int32_t, void** out) {
    auto* part = new FakeComm();
    part->reach = of(obj).reach;
    part->parent = &of(obj);
    *out = part;
    return KEEL_OK;
  }
  static void destroy(void* obj) {
    if (of(obj).parent) delete &of(obj);
    else ++of(obj).destroyed;
  }
  static FakeComm& root(void* obj) { return of(obj).parent ? *of(obj).parent : of(obj); }
  static keel_status all_reduce(void* obj, const void* send, void* recv, size_t count, keel_dtype, int32_t,
                                keel_comm_request** request) {
    root(obj).seen.insert(root(obj).seen.end(), {send, recv});
    for (size_t i = 0; i < count; ++i) static_cast<float*>(recv)[i] = 2 * static_cast<const float*>(send)[i];
    if (request) *request = reinterpret_cast<keel_comm_request*>(obj);
    return KEEL_OK;
  }
  static keel_status reduce_scatter(void* obj, const void* send, void* recv, size_t count, keel_dtype, int32_t,
                                    keel_comm_request**) {
    root(obj).seen.insert(root(obj).seen.end(), {send, recv});
    auto* in = static_cast<const float*>(send);
    for (size_t i = 0; i < count; ++i) static_cast<float*>(recv)[i] = in[i] + in[count + i];
    return KEEL_OK;
  }
  static keel_status all_gather(void* obj, const void* send, void* recv, size_t count, keel_dtype,
                                keel_comm_request** request) {
    root(obj).seen.insert(root(obj).seen.end(), {send, recv});
    for (size_t r = 0; r < 2; ++r) std::memcpy(static_cast<float*>(recv) + r * count, send, count * sizeof(float));
    if (request) *request = reinterpret_cast<keel_comm_request*>(obj);
    return KEEL_OK;
  }
  // Every element of send, negated and in reverse order (the counts only say how many).
  static keel_status all_to_all_v(void* obj, const void* send, const size_t* send_counts, void* recv,
                                  const size_t* recv_counts, keel_dtype, keel_comm_request**) {
    root(obj).seen.insert(root(obj).seen.end(), {send, recv});
    const size_t n = send_counts[0] + send_counts[1];
    if (recv_counts[0] + recv_counts[1] != n) return KEEL_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; ++i) static_cast<float*>(recv)[i] = -static_cast<const float*>(send)[n - 1 - i];
    return KEEL_OK;
  }
  static keel_status wait(void*, keel_comm_request*) { return KEEL_OK; }
  static keel_status reaches(void* obj, keel_device, int32_t* out) {
    *out = of(obj).reach;
    return KEEL_OK;
  }
  static keel_comm_api table() {
    keel_comm_api api{};
    api.struct_size = sizeof(api);
    api.rank = rank;
    api.size = size;
    api.split = split;
    api.destroy = destroy;
    api.all_reduce = all_reduce;
    api.reduce_scatter = reduce_scatter;
    api.all_gather = all_gather;
    api.all_to_all_v = all_to_all_v;
    api.wait = wait;
    api.reaches = reaches;
    return api;
  }
};

class CommBridgeTest : public ::testing::Test {
 protected:
  keel_backend_api backend_table = FakeBackend::table();
  keel_comm_api comm_table = FakeComm::table();
  FakeBackend backend;
  FakeComm comm;
  keel_support::BackendOps backend_ref() { return {&backend_table, &backend}; }
};

TEST_F(CommBridgeTest, AQueuedCommIsHandedOutUnchanged) {
  comm.reach = KEEL_COMM_REACH_QUEUED;
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  EXPECT_EQ(bridged.comm, &comm_table);
  EXPECT_EQ(bridged.obj, &comm);
}

TEST_F(CommBridgeTest, ASyncedCommSeesTheCallersBuffersAfterTheQueueDrained) {
  comm.reach = KEEL_COMM_REACH_SYNCED;
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  ASSERT_NE(bridged.obj, static_cast<void*>(&comm));
  std::vector<float> send{1, 2, 3}, recv(3);
  ASSERT_EQ(bridged.comm->all_reduce(bridged.obj, send.data(), recv.data(), 3, kFloat, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
  EXPECT_EQ(backend.synchronizations, 1);
  EXPECT_EQ(comm.seen, (std::vector<const void*>{send.data(), recv.data()}));
  EXPECT_EQ(recv, (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(backend.copies_in + backend.copies_out, 0);
  bridged.comm->destroy(bridged.obj);
  EXPECT_EQ(comm.destroyed, 1);
}

TEST_F(CommBridgeTest, AnUnreachableCommSeesOnlyStagingBuffersAndTheResultsComeBack) {
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  std::vector<float> send{1, 2, 3, 4}, recv(2);
  ASSERT_EQ(bridged.comm->reduce_scatter(bridged.obj, send.data(), recv.data(), 2, kFloat, KEEL_REDUCE_SUM, nullptr),
            KEEL_OK);
  EXPECT_EQ(recv, (std::vector<float>{4, 6}));  // both blocks of 2 elements staged in, not only one
  ASSERT_EQ(comm.seen.size(), 2u);
  for (const void* buffer : comm.seen) {
    EXPECT_NE(buffer, static_cast<const void*>(send.data()));
    EXPECT_NE(buffer, static_cast<const void*>(recv.data()));
    EXPECT_EQ(backend.staging.count(buffer), 1u) << "the comm was handed memory the backend did not stage";
  }
  EXPECT_EQ(backend.copies_out, 1);
  EXPECT_EQ(backend.copies_in, 1);

  std::vector<float> inout{5, 6};  // in place: one staging buffer
  ASSERT_EQ(bridged.comm->all_reduce(bridged.obj, inout.data(), inout.data(), 2, kFloat, KEEL_REDUCE_SUM, nullptr),
            KEEL_OK);
  EXPECT_EQ(inout, (std::vector<float>{10, 12}));
  bridged.comm->destroy(bridged.obj);
  EXPECT_TRUE(backend.staging.empty()) << "staging buffers outlived the communicator";
}

TEST_F(CommBridgeTest, AStagedAllToAllMovesEveryCountedElementBothWays) {
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  ASSERT_TRUE(KEEL_HAS_SLOT(bridged.comm, all_to_all_v));
  const size_t send_counts[2] = {1, 3}, recv_counts[2] = {2, 2};
  std::vector<float> send{1, 2, 3, 4}, recv(4);
  ASSERT_EQ(bridged.comm->all_to_all_v(bridged.obj, send.data(), send_counts, recv.data(), recv_counts, kFloat, nullptr),
            KEEL_OK);
  EXPECT_EQ(recv, (std::vector<float>{-4, -3, -2, -1}));  // all 4 sent elements staged in, all 4 received out
  ASSERT_EQ(comm.seen.size(), 2u);
  for (const void* buffer : comm.seen) EXPECT_EQ(backend.staging.count(buffer), 1u);
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, AStagedAllToAllRefusesTotalsBeyondASizeTBeforeStaging) {
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  const size_t send_counts[2] = {1, SIZE_MAX / 4}, recv_counts[2] = {2, 2};
  std::vector<float> send(4), recv(4);
  EXPECT_EQ(bridged.comm->all_to_all_v(bridged.obj, send.data(), send_counts, recv.data(), recv_counts, kFloat, nullptr),
            KEEL_ERR_INVALID_ARGUMENT);
  const std::string error = keel::last_error();
  EXPECT_NE(error.find("comm all_to_all_v: the counts through rank 1 (send " + std::to_string(SIZE_MAX / 4) +
                       ", recv 2 elements of 4 bytes) total more bytes"),
            std::string::npos)
      << error;
  EXPECT_TRUE(comm.seen.empty()) << "the plugin was called";
  EXPECT_EQ(backend.copies_in, 0) << "something was staged";
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, APluginWithoutAllToAllGivesABridgedCommWithoutIt) {
  comm_table.all_to_all_v = nullptr;  // a plugin built before 0.19 (its table is shorter still)
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  EXPECT_FALSE(KEEL_HAS_SLOT(bridged.comm, all_to_all_v)) << "a caller must see the slot missing, not a failing call";
  EXPECT_TRUE(KEEL_HAS_SLOT(bridged.comm, all_gather));
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, ANonBlockingStagedResultArrivesAtWait) {
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  std::vector<float> send{7, 8}, recv(4, 0.0f);
  keel_comm_request* request = nullptr;
  ASSERT_EQ(bridged.comm->all_gather(bridged.obj, send.data(), recv.data(), 2, kFloat, &request), KEEL_OK);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(recv, (std::vector<float>{0, 0, 0, 0}));  // still in the staging buffer
  ASSERT_EQ(bridged.comm->wait(bridged.obj, request), KEEL_OK);
  EXPECT_EQ(recv, (std::vector<float>{7, 8, 7, 8}));
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, HostBuffersAreStagedThroughBackendMemoryForACommThatCannotReachThem) {
  // nccl and the core's own sums: host vectors staged into backend memory and back.
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kHost);
  std::vector<float> send{1.5f}, recv(1);
  ASSERT_EQ(bridged.comm->all_reduce(bridged.obj, send.data(), recv.data(), 1, kFloat, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
  EXPECT_EQ(recv[0], 3.0f);
  EXPECT_EQ(backend.copies_in, 1);   // host -> backend before
  EXPECT_EQ(backend.copies_out, 1);  // backend -> host after
  EXPECT_EQ(backend.synchronizations, 0);
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, ASplitOfABridgedCommIsBridgedToo) {
  const keel::BridgedComm bridged = keel::bridge_comm(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend);
  void* part = nullptr;
  ASSERT_EQ(bridged.comm->split(bridged.obj, 0, 0, &part), KEEL_OK);
  std::vector<float> send{1}, recv(1);
  ASSERT_EQ(bridged.comm->all_reduce(part, send.data(), recv.data(), 1, kFloat, KEEL_REDUCE_SUM, nullptr), KEEL_OK);
  EXPECT_EQ(recv[0], 2.0f);
  ASSERT_EQ(comm.seen.size(), 2u);
  EXPECT_EQ(backend.staging.count(comm.seen[0]), 1u);
  bridged.comm->destroy(part);
  bridged.comm->destroy(bridged.obj);
}

TEST_F(CommBridgeTest, ACommBuiltBefore08IsSyncedOnHostMemoryAndUnreachableElsewhere) {
  comm_table.struct_size = offsetof(keel_comm_api, create_world_on);
  EXPECT_EQ(keel::comm_reach(&comm_table, &comm, backend_ref(), keel::BufferSide::kHost), KEEL_COMM_REACH_SYNCED);
  EXPECT_EQ(keel::comm_reach(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend), KEEL_COMM_REACH_NONE);
  backend.device = {KEEL_DEVICE_CPU, 0};
  EXPECT_EQ(keel::comm_reach(&comm_table, &comm, backend_ref(), keel::BufferSide::kBackend), KEEL_COMM_REACH_SYNCED);
}

}  // namespace
