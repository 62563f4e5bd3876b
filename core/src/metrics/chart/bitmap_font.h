// A 5×8 pixel font for printable ASCII, so PNG charts can carry labels without a font library.
#pragma once

#include <cstdint>

namespace keel::chart {

inline constexpr int kGlyphWidth = 5, kGlyphHeight = 8, kGlyphAdvance = 6;

// Five columns, left to right; bit r of a column is row r from the top (rows 0–6 sit on the
// baseline, row 7 holds descenders). A character outside ' '..'~' gets a hollow box.
const uint8_t* glyph_columns(char c);

}  // namespace keel::chart
