// The `cuda` backend as the core sees it, on any machine: libkeel-cuda.so loads with dlopen
// (with or without a GPU or driver), its entry describes a backend of ABI 0.9 with every slot of 0.8
// filled, its config section is validated with messages naming the JSON path, and without a
// usable GPU probe and create fail with a message naming CUDA instead of crashing.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <keel/backend.h>
#include <keel/plugin.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string g_last_error;
keel_status set_error(keel_status code, const char* message) {
  g_last_error = message;
  return code;
}
void log_line(int32_t, const char*, const char*) {}
const keel_host kHost = {
    sizeof(keel_host), KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR, set_error, log_line, nullptr};

const keel_plugin_info* load_entry() {
  static void* library = dlopen(KEEL_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    ADD_FAILURE() << "dlopen " << KEEL_CUDA_PLUGIN_PATH << ": " << dlerror();
    return nullptr;
  }
  auto entry = reinterpret_cast<keel_plugin_entry_fn>(dlsym(library, KEEL_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    ADD_FAILURE() << "no " << KEEL_PLUGIN_ENTRY_SYMBOL << " in " << KEEL_CUDA_PLUGIN_PATH;
    return nullptr;
  }
  const keel_plugin_list* list = entry();
  if (!list || list->count != 1) {
    ADD_FAILURE() << "expected one plugin in the list";
    return nullptr;
  }
  return &list->plugins[0];
}

const keel_backend_api* api() {
  const keel_plugin_info* info = load_entry();
  return info ? static_cast<const keel_backend_api*>(info->api) : nullptr;
}

keel_status validate(const std::string& config) {
  g_last_error.clear();
  return api()->validate_config(&kHost, config.c_str(), "backend");
}

// Built against today's headers, it fills every slot up to 0.8's last and the Llama family's
// (0.9): its table is the whole backend.h of today.
TEST(BackendCudaPlugin, EntryDescribesABackendWithEverySlotFilled) {
  const keel_plugin_info* info = load_entry();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->kind, KEEL_KIND_BACKEND);
  EXPECT_STREQ(info->name, "cuda");
  EXPECT_EQ(info->abi_major, 0u);
  EXPECT_EQ(info->abi_minor, uint32_t(KEEL_ABI_VERSION_MINOR));
  EXPECT_NE(std::string(info->description).find("verified on an NVIDIA H200, driver 580.159.04"), std::string::npos)
      << "the description must say on which GPU and driver the backend was verified: " << info->description;
  // `keel plugins` says which attention runs: cuDNN's (and which library) or Keel's kernels and why.
  const std::string description = info->description;
  const bool cudnn = description.find("attention: cuDNN fused flash attention for bf16") != std::string::npos &&
                     description.find("(cuDNN 9.") != std::string::npos;
  const bool kernels = description.find("attention: Keel's kernels (") != std::string::npos;
  EXPECT_TRUE(cudnn != kernels) << description;
  const auto* table = static_cast<const keel_backend_api*>(info->api);
  ASSERT_NE(table, nullptr);
  ASSERT_EQ(table->struct_size, sizeof(keel_backend_api));
  // Every field after struct_size is a function pointer: none up to 0.17's last may be NULL. The
  // 0.18 slot attention_decode_dt is optional and not yet written for the GPU: without it the
  // core generates by running whole windows, as before 0.18.
  EXPECT_EQ(table->attention_decode_dt, nullptr) << "a cuda attention_decode_dt: check it here, and remove this line";
  constexpr size_t kSlots = (offsetof(keel_backend_api, attention_decode_dt) - sizeof(size_t)) / sizeof(void*);
  void* slots[kSlots];
  std::memcpy(slots, reinterpret_cast<const char*>(table) + sizeof(size_t), sizeof(slots));
  for (size_t i = 0; i < kSlots; ++i) EXPECT_NE(slots[i], nullptr) << "slot " << i << " after struct_size is NULL";
#define EXPECT_SLOT(slot) EXPECT_TRUE(KEEL_HAS_SLOT(table, slot)) << #slot " is missing"
  EXPECT_SLOT(probe);
  EXPECT_SLOT(queue);
  EXPECT_SLOT(event_synchronize);
  EXPECT_SLOT(copy_async);
  EXPECT_SLOT(convert);
  EXPECT_SLOT(attention_backward_dt);
  EXPECT_SLOT(crossentropy_combine);
  EXPECT_SLOT(adamw_update);
  EXPECT_SLOT(sgd_update);
  EXPECT_SLOT(rmsnorm_forward_dt);
  EXPECT_SLOT(rope_backward_dt);
  EXPECT_SLOT(swiglu_backward_dt);
  EXPECT_SLOT(attention_gqa_backward_dt);
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
}

TEST(BackendCudaPlugin, ValidatesItsSectionWithoutAGpu) {
  ASSERT_NE(api(), nullptr);
  EXPECT_EQ(validate(R"({"plugin": "cuda"})"), KEEL_OK) << g_last_error;
  EXPECT_EQ(validate(R"({"plugin": "cuda", "device": 3, "precision": "bf16", "allow_tf32": true,
                         "peak_tflops": 989})"),
            KEEL_OK)
      << g_last_error;

  EXPECT_EQ(validate(R"({"precision": "fp16"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.precision: expected one of \"fp32\", \"bf16\", found \"fp16\""),
            std::string::npos)
      << g_last_error;
  EXPECT_EQ(validate(R"({"device": -1})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.device: expected a value in [0, 1023], found -1"), std::string::npos)
      << g_last_error;
  EXPECT_EQ(validate(R"({"device": "0"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.device: expected an integer"), std::string::npos) << g_last_error;
  EXPECT_EQ(validate(R"({"allow_tf32": "yes"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.allow_tf32: expected a boolean"), std::string::npos) << g_last_error;
  EXPECT_EQ(validate(R"({"peak_tflops": -5})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.peak_tflops: expected a value in"), std::string::npos) << g_last_error;
  EXPECT_EQ(validate(R"({"attention": "cudnn", "precision": "bf16"})"), KEEL_OK) << g_last_error;
  EXPECT_EQ(validate(R"({"attention": "kernels"})"), KEEL_OK) << g_last_error;
  EXPECT_EQ(validate(R"({"gelu_epilogue": false})"), KEEL_OK) << g_last_error;
  EXPECT_EQ(validate(R"({"gelu_epilogue": 1})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_EQ(validate(R"({"deterministic_attention": false})"), KEEL_OK) << g_last_error;
  EXPECT_EQ(validate(R"({"attention": "cudnn", "precision": "fp32"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.attention: \"cudnn\" needs \"precision\": \"bf16\""), std::string::npos)
      << g_last_error;
  EXPECT_EQ(validate(R"({"attention": "flash"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.attention: expected one of \"auto\", \"cudnn\", \"kernels\", found \"flash\""),
            std::string::npos)
      << g_last_error;
  EXPECT_EQ(validate(R"({"precison": "bf16"})"), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.precison: unknown key (did you mean \"precision\"?)"), std::string::npos)
      << g_last_error;
  EXPECT_NE(g_last_error.find("backend cuda: "), std::string::npos) << "messages name the plugin: " << g_last_error;
}

// Without a GPU (this is what CI machines have) probe names what is missing; with one it passes
// and create makes a backend on device 0.
TEST(BackendCudaPlugin, ProbeAndCreateNameTheMissingGpuOrSucceed) {
  ASSERT_NE(api(), nullptr);
  g_last_error.clear();
  const keel_status probed = api()->probe(&kHost);
  keel_backend_create_args args{sizeof(args), R"({"plugin": "cuda"})", "backend"};
  void* handle = nullptr;
  if (probed == KEEL_OK) {
    ASSERT_EQ(api()->create(&kHost, &args, &handle), KEEL_OK) << g_last_error;
    keel_device device{};
    EXPECT_EQ(api()->device(handle, &device), KEEL_OK);
    EXPECT_EQ(device.device_type, KEEL_DEVICE_CUDA);
    EXPECT_EQ(device.device_id, 0);
    api()->destroy(handle);
    return;
  }
  const std::string probe_error = g_last_error;
  EXPECT_NE(probe_error.find("no CUDA device"), std::string::npos) << probe_error;
  EXPECT_NE(probe_error.find("cudaGetDeviceCount"), std::string::npos) << probe_error;

  g_last_error.clear();
  EXPECT_EQ(api()->create(&kHost, &args, &handle), probed);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(g_last_error, probe_error) << "create must refuse with the probe's message";

  // A bad section is reported before the device is looked for.
  keel_backend_create_args bad{sizeof(bad), R"({"precision": "int8"})", "backend"};
  EXPECT_EQ(api()->create(&kHost, &bad, &handle), KEEL_ERR_INVALID_CONFIG);
  EXPECT_NE(g_last_error.find("backend.precision"), std::string::npos) << g_last_error;
}

}  // namespace
