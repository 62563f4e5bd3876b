// The slots of shape_only_comm.h. One generic lambda refuses for every slot that would move data:
// a captureless generic lambda converts to a function pointer of each slot's signature.
#include "train/shape_only_comm.h"

#include "host/errors.h"

namespace keel {
namespace {

ShapeOnlyComm* as_shape(void* comm) { return static_cast<ShapeOnlyComm*>(comm); }

constexpr auto moves_nothing = [](auto...) -> keel_status {
  set_last_error("keel validate's stand-in tensor-parallel group moves no data: a model may read its rank and size "
                 "at create, but not communicate");
  return KEEL_ERR_UNIMPLEMENTED;
};

keel_comm_api make_table() {
  keel_comm_api table{};
  table.struct_size = sizeof(table);
  table.validate_config = moves_nothing;
  table.create_world = moves_nothing;
  table.destroy = [](void*) {};  // the caller owns the ShapeOnlyComm
  table.rank = [](void* comm, int32_t* out_rank) -> keel_status {
    *out_rank = as_shape(comm)->rank;
    return KEEL_OK;
  };
  table.size = [](void* comm, int32_t* out_size) -> keel_status {
    *out_size = as_shape(comm)->size;
    return KEEL_OK;
  };
  table.split = moves_nothing;
  table.all_reduce = moves_nothing;
  table.reduce_scatter = moves_nothing;
  table.all_gather = moves_nothing;
  table.broadcast = moves_nothing;
  table.send = moves_nothing;
  table.recv = moves_nothing;
  table.barrier = moves_nothing;
  table.wait = moves_nothing;
  table.counters = moves_nothing;
  table.abort_world = moves_nothing;
  table.all_to_all_v = moves_nothing;
  return table;
}

}  // namespace

const keel_comm_api* shape_only_comm_api() {
  static const keel_comm_api table = make_table();
  return &table;
}

}  // namespace keel
