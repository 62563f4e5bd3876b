// A communicator that knows only its shape (rank r of n) and moves nothing: the tensor- and
// expert-parallel groups `keel validate` hands the model it creates to ask about a layout (model_probe.h), where no
// other rank exists. A model may read the group's rank and size at create, as it does in a run;
// every collective and point-to-point slot refuses with KEEL_ERR_UNIMPLEMENTED.
#pragma once

#include <keel/comm.h>

#include <cstdint>

namespace keel {

struct ShapeOnlyComm {
  int32_t rank = 0;
  int32_t size = 1;
};

// The table whose slots take a ShapeOnlyComm* as their communicator; static, lives forever.
const keel_comm_api* shape_only_comm_api();

}  // namespace keel
