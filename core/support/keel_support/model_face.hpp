// Forwarding header: renamed keel_support/model/model_slots.hpp (ModelFace is now ModelSlots), in keel_support's rooms by plugin kind.
// Kept so plugin source written against the flat layout still compiles; goes away after the next release.
#pragma once
#include "keel_support/model/model_slots.hpp"

namespace keel_support {
template <typename Model>
using ModelFace = ModelSlots<Model>;  // the old name of ModelSlots
}  // namespace keel_support
