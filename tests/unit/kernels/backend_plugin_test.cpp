// The `cpu` backend as the core sees it: libkeel-cpu.so loaded with dlopen, its entry checked
// (kind, name, ABI, every slot filled), its config validation and error reporting, memory
// slots, and ops driven through the table against naive loops.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend_plugin.h"

using namespace keel_test;

namespace {

TEST(BackendCpuPlugin, EntryDescribesTheCpuBackendWithEverySlotFilled) {
  const keel_plugin_info* info = load_entry();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->kind, KEEL_KIND_BACKEND);
  EXPECT_STREQ(info->name, "cpu");
  EXPECT_STREQ(info->version, "0.1.0");
  EXPECT_EQ(info->abi_major, uint32_t{KEEL_ABI_VERSION_MAJOR});
  EXPECT_EQ(info->abi_minor, uint32_t{KEEL_ABI_VERSION_MINOR});
  const auto* table = static_cast<const keel_backend_api*>(info->api);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->struct_size, sizeof(keel_backend_api));
#define EXPECT_SLOT(slot) EXPECT_TRUE(KEEL_HAS_SLOT(table, slot)) << #slot " is missing"
  EXPECT_SLOT(validate_config);
  EXPECT_SLOT(create);
  EXPECT_SLOT(destroy);
  EXPECT_SLOT(device);
  EXPECT_SLOT(peak_flops);
  EXPECT_SLOT(alloc);
  EXPECT_SLOT(free_memory);
  EXPECT_SLOT(copy);
  EXPECT_SLOT(fill_zero);
  EXPECT_SLOT(synchronize);
  EXPECT_SLOT(matmul_forward);
  EXPECT_SLOT(matmul_backward);
  EXPECT_SLOT(layernorm_forward);
  EXPECT_SLOT(layernorm_backward);
  EXPECT_SLOT(attention_saved_floats);
  EXPECT_SLOT(attention_forward);
  EXPECT_SLOT(attention_backward);
  EXPECT_SLOT(gelu_forward);
  EXPECT_SLOT(gelu_backward);
  EXPECT_SLOT(add);
  EXPECT_SLOT(accumulate);
  EXPECT_SLOT(scale);
  EXPECT_SLOT(embedding_forward);
  EXPECT_SLOT(embedding_backward);
  EXPECT_SLOT(crossentropy_forward);
  EXPECT_SLOT(crossentropy_backward);
  EXPECT_SLOT(sum_squares);
  EXPECT_SLOT(embedding_rows_forward);  // 0.6
  EXPECT_SLOT(embedding_rows_backward);
  EXPECT_SLOT(crossentropy_shard_stats);
  EXPECT_SLOT(crossentropy_shard_backward);
  EXPECT_SLOT(probe);  // 0.8
  EXPECT_SLOT(compute_dtype);
  EXPECT_SLOT(queue);
  EXPECT_SLOT(event_create);
  EXPECT_SLOT(event_destroy);
  EXPECT_SLOT(event_record);
  EXPECT_SLOT(event_wait);
  EXPECT_SLOT(event_synchronize);
  EXPECT_SLOT(alloc_host);
  EXPECT_SLOT(free_host);
  EXPECT_SLOT(copy_async);
  EXPECT_SLOT(convert);
  EXPECT_SLOT(matmul_forward_dt);
  EXPECT_SLOT(matmul_backward_dt);
  EXPECT_SLOT(layernorm_forward_dt);
  EXPECT_SLOT(layernorm_backward_dt);
  EXPECT_SLOT(attention_saved_bytes);
  EXPECT_SLOT(attention_forward_dt);
  EXPECT_SLOT(attention_backward_dt);
  EXPECT_SLOT(gelu_forward_dt);
  EXPECT_SLOT(gelu_backward_dt);
  EXPECT_SLOT(add_dt);
  EXPECT_SLOT(accumulate_dt);
  EXPECT_SLOT(scale_dt);
  EXPECT_SLOT(embedding_forward_dt);
  EXPECT_SLOT(embedding_backward_dt);
  EXPECT_SLOT(embedding_rows_forward_dt);
  EXPECT_SLOT(embedding_rows_backward_dt);
  EXPECT_SLOT(crossentropy_stats_dt);
  EXPECT_SLOT(crossentropy_combine);
  EXPECT_SLOT(crossentropy_backward_dt);
  EXPECT_SLOT(sum_squares_dt);
  EXPECT_SLOT(adamw_update);
  EXPECT_SLOT(sgd_update);
  EXPECT_SLOT(rmsnorm_forward_dt);  // 0.9
  EXPECT_SLOT(rmsnorm_backward_dt);
  EXPECT_SLOT(rope_forward_dt);
  EXPECT_SLOT(rope_backward_dt);
  EXPECT_SLOT(swiglu_forward_dt);
  EXPECT_SLOT(swiglu_backward_dt);
  EXPECT_SLOT(attention_gqa_saved_bytes);
  EXPECT_SLOT(attention_gqa_forward_dt);
  EXPECT_SLOT(attention_gqa_backward_dt);
  EXPECT_SLOT(attention_decode_dt);  // 0.18
  EXPECT_SLOT(moe_route);  // 0.19
  EXPECT_SLOT(moe_route_backward);
  EXPECT_SLOT(moe_permute_plan);
  EXPECT_SLOT(moe_permute_dt);
  EXPECT_SLOT(moe_unpermute_dt);
  EXPECT_SLOT(moe_unpermute_scale_backward_dt);
  EXPECT_SLOT(grouped_matmul_forward_dt);
  EXPECT_SLOT(grouped_matmul_backward_dt);
  EXPECT_SLOT(attention_block_forward);
  EXPECT_SLOT(attention_block_backward);
  EXPECT_SLOT(rope_at_forward_dt);
  EXPECT_SLOT(rope_at_backward_dt);
  EXPECT_SLOT(nf4_dequantize_dt);
  EXPECT_SLOT(fake_quantize_dt);
  EXPECT_SLOT(fake_quantize_tokens_dt);
  EXPECT_SLOT(dropout_dt);
  EXPECT_SLOT(attention_merge_dt);
  EXPECT_SLOT(copy_rows_dt);
#undef EXPECT_SLOT
  // Every slot of this ABI minor is listed above: the table holds nothing after the last one.
  EXPECT_EQ(offsetof(keel_backend_api, copy_rows_dt) + sizeof(table->copy_rows_dt),
            sizeof(keel_backend_api));
}

TEST(BackendCpuPlugin, ValidateConfigAcceptsItsKeysAndExplainsMistakes) {
  ASSERT_NE(api(), nullptr);
  EXPECT_EQ(api()->validate_config(&kHost, R"({"plugin": "cpu"})", "backend"), KEEL_OK);
  EXPECT_EQ(api()->validate_config(&kHost,
                                   R"({"plugin": "cpu", "threads": 2, "peak_tflops": 1.5,
                                       "openblas_coretype": "env", "precision": "fp32",
                                       "gemm_threading": "openblas", "op_profile": false})",
                                   "backend"),
            KEEL_OK);

  EXPECT_EQ(api()->validate_config(&kHost, R"({"plugin": "cpu", "thread": 2})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.thread: unknown key (did you mean \"threads\"?)"), std::string::npos)
      << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, R"({"threads": -1})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.threads"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, R"({"threads": "four"})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("expected an integer"), std::string::npos) << g_last_error;

  EXPECT_EQ(api()->validate_config(&kHost, R"({"precision": "bf16"})", "backend"), KEEL_OK) << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, R"({"precision": "fp16"})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend cpu: backend.precision: expected \"fp32\" or \"bf16\""), std::string::npos)
      << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, R"({"precision": 16})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.precision"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, R"({"gemm_threading": "partition"})", "backend"), KEEL_OK);
  EXPECT_EQ(api()->validate_config(&kHost, R"({"gemm_threading": "blis"})", "backend"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.gemm_threading: expected \"partition\""), std::string::npos) << g_last_error;
  EXPECT_NE(g_last_error.find("found \"blis\""), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->validate_config(&kHost, "{not json", "backend"), KEEL_ERR_INVALID_CONFIG);
}

TEST(BackendCpuPlugin, CreateReportsDeviceAndConfiguredOrMeasuredPeak) {
  ASSERT_NE(api(), nullptr);
  {
    Backend configured(R"({"plugin": "cpu", "peak_tflops": 1.5, "threads": 1})");
    ASSERT_EQ(configured.status, KEEL_OK) << g_last_error;
    double flops = 0;
    ASSERT_EQ(api()->peak_flops(configured.handle, &flops), KEEL_OK);
    EXPECT_EQ(flops, 1.5e12);
    keel_device device{-1, -1};
    ASSERT_EQ(api()->device(configured.handle, &device), KEEL_OK);
    EXPECT_EQ(device.device_type, KEEL_DEVICE_CPU);
    EXPECT_EQ(device.device_id, 0);
    EXPECT_EQ(api()->synchronize(configured.handle), KEEL_OK);
  }
  g_log.clear();
  Backend measured(R"({"plugin": "cpu"})");
  ASSERT_EQ(measured.status, KEEL_OK) << g_last_error;
  double flops = 0;
  ASSERT_EQ(api()->peak_flops(measured.handle, &flops), KEEL_OK);
  EXPECT_GT(flops, 1e9);  // any CPU this runs on does more than 1 GFLOP/s of sgemm
  bool logged = false;
  for (const auto& line : g_log) logged |= line.find("measured sgemm peak") != std::string::npos;
  EXPECT_TRUE(logged) << "the measured peak should be logged";

  void* handle = reinterpret_cast<void*>(1);
  keel_backend_create_args bad{sizeof(bad), R"({"precision": "fp16"})", "backend"};
  EXPECT_EQ(api()->create(&kHost, &bad, &handle), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(handle, reinterpret_cast<void*>(1)) << "outputs are untouched on error";
}

// "op_profile": each slot's calls, time and counted work, logged as a table when the backend goes.
TEST(BackendCpuPlugin, OpProfileLogsEachSlotsCallsAndWorkAtDestroy) {
  const int64_t N = 64, IC = 96, OC = 80;
  std::vector<float> x(N * IC, 0.5f), w(OC * IC, 0.25f), y(N * OC), dy(N * OC, 1.0f), dw(OC * IC), dx(N * IC);
  g_log.clear();
  {
    Backend backend(R"({"peak_tflops": 1, "op_profile": true})");
    ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(api()->matmul_forward(backend.handle, y.data(), x.data(), w.data(), nullptr, N, IC, OC), KEEL_OK);
    ASSERT_EQ(api()->matmul_backward(backend.handle, dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N,
                                     IC, OC),
              KEEL_OK);
    ASSERT_EQ(api()->fill_zero(backend.handle, dw.data(), dw.size() * sizeof(float)), KEEL_OK);
    EXPECT_EQ(y[0], 0.5f * 0.25f * IC);  // the ops ran
  }
  // op, calls, ms, GFLOP, GB, ...: the counts are the formulas' (3 forwards of 2·N·IC·OC, one
  // backward of twice that), independent of the clock.
  auto row = [&](const std::string& op) -> std::vector<std::string> {
    const std::string prefix = "backend cpu: " + op + " ";
    for (const auto& line : g_log) {
      if (line.compare(0, prefix.size(), prefix) != 0) continue;
      std::istringstream fields(line.substr(prefix.size() - op.size() - 1));
      std::vector<std::string> out;
      for (std::string f; fields >> f;) out.push_back(f);
      return out;
    }
    return {};
  };
  const auto forward = row("matmul_forward"), backward = row("matmul_backward"), zero = row("fill_zero");
  ASSERT_GE(forward.size(), 5u) << "no matmul_forward row logged";
  ASSERT_GE(backward.size(), 5u) << "no matmul_backward row logged";
  ASSERT_GE(zero.size(), 5u) << "no fill_zero row logged";
  EXPECT_EQ(forward[1], "3");
  EXPECT_NEAR(std::stod(forward[3]), 3 * 2.0 * N * IC * OC / 1e9, 1e-3);
  EXPECT_EQ(backward[1], "1");
  EXPECT_NEAR(std::stod(backward[3]), 4.0 * N * IC * OC / 1e9, 1e-3);
  EXPECT_NEAR(std::stod(zero[4]), OC * IC * 4.0 / 1e9, 1e-3);
  EXPECT_FALSE(row("total").empty());

  g_log.clear();
  { Backend quiet(R"({"peak_tflops": 1})"); }
  EXPECT_TRUE(row("total").empty()) << "no table without op_profile";
}

TEST(BackendCpuPlugin, MemoryIsAlignedZeroedAndCopies) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{5} << 20}) {
    void* ptr = nullptr;
    ASSERT_EQ(api()->alloc(backend.handle, bytes, &ptr), KEEL_OK);
    ASSERT_NE(ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 64, 0u) << bytes << " bytes";
    const auto* p = static_cast<const unsigned char*>(ptr);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
    api()->free_memory(backend.handle, ptr);
  }
  std::vector<float> host = {1, 2, 3, 4, 5}, back(5, 0.0f);
  void* dev = nullptr;
  ASSERT_EQ(api()->alloc(backend.handle, 5 * sizeof(float), &dev), KEEL_OK);
  ASSERT_EQ(api()->copy(backend.handle, dev, host.data(), 5 * sizeof(float), KEEL_COPY_HOST_TO_DEVICE), KEEL_OK);
  ASSERT_EQ(api()->copy(backend.handle, back.data(), dev, 5 * sizeof(float), KEEL_COPY_DEVICE_TO_HOST), KEEL_OK);
  EXPECT_EQ(back, host);
  ASSERT_EQ(api()->fill_zero(backend.handle, dev, 2 * sizeof(float)), KEEL_OK);
  ASSERT_EQ(api()->copy(backend.handle, back.data(), dev, 5 * sizeof(float), KEEL_COPY_DEVICE_TO_HOST), KEEL_OK);
  EXPECT_EQ(back, (std::vector<float>{0, 0, 3, 4, 5}));
  EXPECT_EQ(api()->copy(backend.handle, back.data(), dev, 4, 7), KEEL_ERR_INVALID_ARGUMENT);
  api()->free_memory(backend.handle, dev);
}

TEST(BackendCpuPlugin, MatmulForwardThroughTheTableMatchesLoops) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  const int64_t N = 7, IC = 13, OC = 11;
  std::vector<float> inp(N * IC), weight(OC * IC), bias(OC), out(N * OC);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = std::sin(0.37 * i);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = std::cos(0.11 * i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * i;
  ASSERT_EQ(api()->matmul_forward(backend.handle, out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC),
            KEEL_OK);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double want = bias[o];
      for (int64_t i = 0; i < IC; ++i) want += double(inp[n * IC + i]) * weight[o * IC + i];
      EXPECT_NEAR(out[n * OC + o], want, 1e-5) << "out[" << n << "," << o << "]";
    }
}

TEST(BackendCpuPlugin, BadArgumentsAreRefusedWithAMessageAndNoOutput) {
  Backend backend(R"({"peak_tflops": 1})");
  ASSERT_EQ(backend.status, KEEL_OK) << g_last_error;
  const std::vector<int32_t> targets = {1, 37};  // 37 is not below V = 37
  std::vector<float> logits(2 * 40, 0.5f), losses = {-1.0f, -1.0f};
  EXPECT_EQ(api()->crossentropy_forward(backend.handle, losses.data(), logits.data(), logits.data(), targets.data(),
                                        2, 37, 40),
            KEEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(g_last_error.find("target 37 at row 1"), std::string::npos) << g_last_error;
  EXPECT_EQ(losses, (std::vector<float>{-1.0f, -1.0f}));
  EXPECT_EQ(logits[0], 0.5f);

  EXPECT_EQ(api()->attention_saved_floats(backend.handle, 1, 4, 10, 3), -1);  // 10 channels, 3 heads
  EXPECT_NE(g_last_error.find("NH = 3"), std::string::npos) << g_last_error;
  EXPECT_EQ(api()->attention_saved_floats(backend.handle, 2, 5, 12, 3), 2 * 3 * 5 * 5);
  EXPECT_EQ(api()->gelu_forward(backend.handle, nullptr, nullptr, -1), KEEL_ERR_INVALID_ARGUMENT);
}

}  // namespace
