// Boxes against element-by-element references: a tensor-parallel piece maps its elements to the
// global tensor as an explicit loop over coordinates says, init_piece gives a piece the numbers
// the whole tensor has there, and copy_overlap moves exactly the shared elements of any two
// (box, flat range) pieces (checked against a per-element global-index map).
#include <gtest/gtest.h>

#include <keel_support/common/piece_box.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "host/param_init.h"

namespace {

using keel_support::PieceBox;

PieceBox box3(const int64_t (&global)[3], const int64_t (&offset)[3], const int64_t (&shape)[3]) {
  PieceBox b = PieceBox::whole(3, global);
  for (int d = 0; d < 3; ++d) b.offset[d] = offset[d], b.shape[d] = shape[d];
  return b;
}

// The global flat index of every element of a box, by nested coordinate loops.
std::vector<int64_t> reference_indices(const PieceBox& b) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < b.shape[0]; ++i)
    for (int64_t j = 0; j < b.shape[1]; ++j)
      for (int64_t k = 0; k < b.shape[2]; ++k)
        out.push_back(((b.offset[0] + i) * b.global_shape[1] + b.offset[1] + j) * b.global_shape[2] + b.offset[2] + k);
  return out;
}

TEST(PieceBox, GlobalIndexFollowsTheCoordinates) {
  const PieceBox b = box3({3, 8, 5}, {0, 4, 0}, {3, 4, 5});  // qkv-like: the middle dimension split
  const std::vector<int64_t> expected = reference_indices(b);
  ASSERT_EQ(int64_t(expected.size()), b.numel());
  for (int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(b.global_index(i), expected[size_t(i)]) << i;
}

TEST(PieceBox, InitPieceEqualsTheWholeTensorThere) {
  keel_param_spec spec{};
  spec.struct_size = sizeof spec;
  spec.name = "h.0.attn.qkv.weight";
  spec.ndim = 3;
  spec.global_shape[0] = 3, spec.global_shape[1] = 8, spec.global_shape[2] = 5;
  spec.tp_dim = 1;
  spec.local_shape[0] = 3, spec.local_shape[1] = 2, spec.local_shape[2] = 5;
  spec.init = KEEL_INIT_NORMAL;
  spec.init_std = 0.02f;
  spec.init_rows = -1;
  std::vector<float> whole(3 * 8 * 5);
  keel::init_param_range(spec, 7, 0, int64_t(whole.size()), whole.data());
  for (int64_t rank = 0; rank < 4; ++rank) {
    spec.local_offset[1] = rank * 2;
    const PieceBox b = PieceBox::of_spec(spec);
    std::vector<float> piece(size_t(b.numel()));
    keel::init_piece_range(spec, 7, 0, b.numel(), piece.data());
    for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(piece[size_t(i)], whole[size_t(b.global_index(i))]) << rank << " " << i;
  }
}

TEST(PieceBox, CopyOverlapMovesExactlyTheSharedElements) {
  std::mt19937 random(20261123);
  const int64_t global[3] = {3, 8, 6};
  auto any_box = [&]() {
    if (random() % 3 == 0) return box3(global, {0, 0, 0}, {3, 8, 6});  // a whole tensor
    int64_t offset[3], shape[3];
    for (int d = 0; d < 3; ++d) {
      offset[d] = std::uniform_int_distribution<int64_t>(0, global[d] - 1)(random);
      shape[d] = std::uniform_int_distribution<int64_t>(1, global[d] - offset[d])(random);
    }
    return box3(global, {offset[0], offset[1], offset[2]}, {shape[0], shape[1], shape[2]});
  };
  int64_t total_copied = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const PieceBox src = any_box(), dst = any_box();
    const int64_t sb = std::uniform_int_distribution<int64_t>(0, src.numel() - 1)(random);
    const int64_t se = std::uniform_int_distribution<int64_t>(sb + 1, src.numel())(random);
    const int64_t db = std::uniform_int_distribution<int64_t>(0, dst.numel() - 1)(random);
    const int64_t de = std::uniform_int_distribution<int64_t>(db + 1, dst.numel())(random);
    // Source values are their own global index; the destination starts at -1.
    std::vector<float> source(size_t(se - sb)), target(size_t(de - db), -1.0f), expected(size_t(de - db), -1.0f);
    for (int64_t i = sb; i < se; ++i) source[size_t(i - sb)] = float(src.global_index(i));
    std::vector<bool> in_source(3 * 8 * 6, false);
    for (int64_t i = sb; i < se; ++i) in_source[size_t(src.global_index(i))] = true;
    int64_t shared = 0;
    for (int64_t i = db; i < de; ++i) {
      const int64_t g = dst.global_index(i);
      if (in_source[size_t(g)]) expected[size_t(i - db)] = float(g), ++shared;
    }
    const int64_t copied = keel_support::copy_overlap(src, sb, se, source.data(), dst, db, de, target.data());
    ASSERT_EQ(copied, shared) << "trial " << trial;
    ASSERT_EQ(target, expected) << "trial " << trial;
    total_copied += copied;
  }
  EXPECT_GT(total_copied, 1000);  // the trials did share elements
}

}  // namespace
