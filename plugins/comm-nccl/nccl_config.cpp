// Parsing of the nccl comm section (see nccl_config.hpp): the keys every comm plugin shares, and
// none of its own.
#include "nccl_config.hpp"

#include <keel_support/comm/comm_section.hpp>

namespace keel_nccl {

NcclCommConfig parse_nccl_comm_config(const char* config_json, const char* json_path) {
  return keel_support::parse_comm_section<NcclCommConfig>(config_json, json_path,
                                                          [](keel_support::JsonSection&, NcclCommConfig&) {});
}

}  // namespace keel_nccl
