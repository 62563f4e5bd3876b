// Which attention shapes the cuda backend hands to cuDNN (kernels/cuda/attention_cudnn_shape.hpp),
// and the key its graph cache files them under, on machines without a GPU: the rules written out
// here independently of the header (cuDNN 9's documented limits: bf16, head sizes in multiples of
// 8 up to 256, query heads a multiple of the key/value heads).
#include <gtest/gtest.h>

#include <unordered_set>

#include "cuda/attention_cudnn_shape.hpp"

namespace {

using keel::cuda::AttentionShape;
using keel::cuda::cudnn_attention_refusal;

TEST(CudnnAttentionShape, TakesBf16HeadSizesInMultiplesOf8UpTo256) {
  for (int64_t hs = 1; hs <= 300; ++hs) {
    const bool expected = hs % 8 == 0 && hs <= 256;
    const std::string why = cudnn_attention_refusal(true, AttentionShape{2, 1024, 12, 12, hs});
    EXPECT_EQ(why.empty(), expected) << "hs " << hs << ": " << why;
  }
}

TEST(CudnnAttentionShape, NamesWhyItRefuses) {
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{2, 64, 12, 12, 20}), "head size 20 is not a multiple of 8");
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{2, 64, 2, 2, 264}), "head size 264 is above cuDNN's 256");
  EXPECT_NE(cudnn_attention_refusal(false, AttentionShape{2, 64, 12, 12, 64}).find("fp32"), std::string::npos);
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{2, 64, 12, 5, 64}), "NH = 12 is not a multiple of NKV = 5");
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{0, 64, 12, 12, 64}), "an empty shape");
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{1, int64_t{1} << 22, 32, 8, 128}),
            "a batch's rows are beyond 2^31 elements");
}

TEST(CudnnAttentionShape, GroupedQueryAndMultiQueryAreTaken) {
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{4, 2048, 32, 8, 64}), "");   // Llama 3.2 1B
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{1, 8192, 32, 8, 128}), "");  // Llama 3 8B
  EXPECT_EQ(cudnn_attention_refusal(true, AttentionShape{2, 67, 4, 1, 80}), "");      // multi-query, odd T
}

TEST(CudnnAttentionShape, RowWidthIsThePackedLayouts) {
  const AttentionShape llama{4, 2048, 32, 8, 64};
  EXPECT_EQ(llama.C(), 2048);
  EXPECT_EQ(llama.row_width(), 2048 + 2 * 8 * 64);
  EXPECT_EQ((AttentionShape{1, 1, 12, 12, 64}.row_width()), 3 * 768);
}

TEST(CudnnAttentionShape, TheGraphCacheKeepsEveryFieldApart) {
  std::unordered_set<AttentionShape, keel::cuda::AttentionShapeHash> cache;
  const AttentionShape base{2, 1024, 12, 12, 64};
  cache.insert(base);
  cache.insert(base);
  EXPECT_EQ(cache.size(), 1u);
  for (AttentionShape changed : {AttentionShape{3, 1024, 12, 12, 64}, AttentionShape{2, 1023, 12, 12, 64},
                                 AttentionShape{2, 1024, 24, 12, 64}, AttentionShape{2, 1024, 12, 6, 64},
                                 AttentionShape{2, 1024, 12, 12, 128}}) {
    EXPECT_FALSE(changed == base);
    EXPECT_TRUE(cache.insert(changed).second);
  }
  EXPECT_EQ(cache.size(), 6u);
}

}  // namespace
