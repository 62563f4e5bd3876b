// The core's view of a model's specs: an array in the struct size of an older minor (0.5's
// keel_param_spec, without local_offset) is read at its own stride and widened with whole-tensor
// pieces; a 0.6 array's tp pieces are accepted only when they are the even split they claim.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "host/errors.h"
#include "train/model_specs.h"

namespace {

constexpr size_t kOldSize = offsetof(keel_param_spec, local_offset);  // 0.1 to 0.5

keel_param_spec spec_2d(const char* name, int64_t rows, int64_t cols, int32_t tp_dim) {
  keel_param_spec s{};
  s.struct_size = sizeof s;
  s.name = name;
  s.ndim = 2;
  s.global_shape[0] = s.local_shape[0] = rows;
  s.global_shape[1] = s.local_shape[1] = cols;
  s.tp_dim = tp_dim;
  s.init_rows = -1;
  return s;
}

std::string error_of(const std::vector<keel_param_spec>& specs, int32_t tp_rank, int32_t tp_size) {
  try {
    keel::widen_model_specs(specs.data(), specs.size(), tp_rank, tp_size, "model 'm': parameter ");
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSpecs, AnOlderStructIsReadAtItsOwnStrideAndGetsWholePieces) {
  // Three specs packed at 0.5's size, as a model built then lays them out.
  std::vector<unsigned char> packed(3 * kOldSize, 0xAB);
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    keel_param_spec s = spec_2d(names[i], 4 + i, 3, -1);
    s.struct_size = kOldSize;
    std::memcpy(packed.data() + i * kOldSize, &s, kOldSize);
  }
  const auto widened = keel::widen_model_specs(reinterpret_cast<const keel_param_spec*>(packed.data()), 3, 0, 1, "");
  ASSERT_EQ(widened.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(widened[i].struct_size, sizeof(keel_param_spec));
    EXPECT_STREQ(widened[i].name, names[i]);
    EXPECT_EQ(widened[i].global_shape[0], 4 + i);
    EXPECT_EQ(widened[i].local_offset[0], 0);  // not the 0xAB filler past the old struct
    EXPECT_EQ(widened[i].local_offset[1], 0);
  }
}

TEST(ModelSpecs, TensorParallelPiecesMustBeTheEvenSplitTheyClaim) {
  keel_param_spec split = spec_2d("w", 8, 6, 0);
  split.local_shape[0] = 4;
  split.local_offset[0] = 4;  // rank 1 of 2: rows [4, 8)
  EXPECT_EQ(error_of({split}, 1, 2), "");
  EXPECT_NE(error_of({split}, 0, 2).find("model 'm': parameter \"w\": dimension 0 has global extent 8, local offset 4 "
                                         "and extent 4; expected tp rank 0's even 1/2 of it"),
            std::string::npos);
  keel_param_spec replicated = spec_2d("ln", 8, 6, -1);
  replicated.local_shape[1] = 3;  // claims a piece though it is replicated
  EXPECT_NE(error_of({replicated}, 0, 2).find("dimension 1 has global extent 6, local offset 0 and extent 3; "
                                              "expected the whole extent"),
            std::string::npos);
  keel_param_spec bad_dim = spec_2d("x", 8, 6, 2);
  EXPECT_NE(error_of({bad_dim}, 0, 2).find("tp_dim 2 is not -1 or a dimension"), std::string::npos);
  keel_param_spec odd = spec_2d("v", 7, 6, 0);
  odd.local_shape[0] = 3;
  EXPECT_NE(error_of({odd}, 0, 2).find("expected tp rank 0's even 1/2 of it"), std::string::npos);
}

TEST(ModelSpecs, NarrowedForAnOlderStrategyReadsBackAtItsStride) {
  // What a strategy built against 0.5 sees: element i at i * its sizeof, each with that struct_size.
  std::vector<keel_param_spec> specs = {spec_2d("a", 2, 3, -1), spec_2d("bb", 5, 7, -1), spec_2d("c", 1, 9, -1)};
  const std::vector<unsigned char> packed = keel::narrow_model_specs(specs, kOldSize);
  ASSERT_EQ(packed.size(), 3 * kOldSize);
  for (size_t i = 0; i < specs.size(); ++i) {
    keel_param_spec seen{};
    std::memcpy(&seen, packed.data() + i * kOldSize, kOldSize);
    EXPECT_EQ(seen.struct_size, kOldSize);
    EXPECT_STREQ(seen.name, specs[i].name);
    EXPECT_EQ(seen.global_shape[0], specs[i].global_shape[0]);
    EXPECT_EQ(seen.local_shape[1], specs[i].local_shape[1]);
    EXPECT_EQ(seen.init_rows, specs[i].init_rows);
  }
  // And the core reads such an array back unchanged.
  const auto again = keel::widen_model_specs(reinterpret_cast<const keel_param_spec*>(packed.data()), 3, 0, 1, "");
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(std::memcmp(&again[i], &specs[i], sizeof(keel_param_spec)), 0) << i;
}

TEST(ModelSpecs, AScalarCannotBeSplit) {
  keel_param_spec scalar{};
  scalar.struct_size = sizeof scalar;
  scalar.name = "s";
  scalar.ndim = 0;
  scalar.tp_dim = 0;
  EXPECT_NE(error_of({scalar}, 0, 2).find("tp_dim 0 is not -1 or a dimension"), std::string::npos);
}

TEST(ModelSpecs, MixedStructSizesAreRefused) {
  std::vector<keel_param_spec> specs = {spec_2d("a", 2, 2, -1), spec_2d("b", 2, 2, -1)};
  specs[1].struct_size = kOldSize;
  EXPECT_NE(error_of(specs, 0, 1).find("parameter 1 has struct_size"), std::string::npos);
}

}  // namespace
