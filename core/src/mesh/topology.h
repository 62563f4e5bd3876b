// Where a run's ranks sit in the network (docs/parallelism.md §8): each rank's host, from its
// hostname (or KEEL_HOST, for a launcher or container that names hosts itself), and each host's
// site, from parallel.sites. Every rank learns every rank's host at start-up (one gather over the
// world), so the mesh can split the data-parallel group by level and the start-up line can show
// the levels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "mesh/mesh_layout.h"

namespace keel {

struct CommGroup;

struct Topology {
  std::vector<std::string> hosts;  // in order of each host's lowest rank
  std::vector<std::string> sites;  // likewise; one unnamed site without parallel.sites
  std::vector<int32_t> host_of;    // world rank -> index in hosts
  std::vector<int32_t> site_of;    // world rank -> index in sites

  // "2 sites, 4 hosts: site a (h1: ranks 0, 4; h2: ranks 1, 5), site b (...)"
  std::string describe() const;
};

// This process's host name: KEEL_HOST when set (checked: letters, digits, . - _), else gethostname.
std::string this_host_name();

// Every rank's host over `world` (collective), and the sites config gives them; throws KeelError
// naming parallel.sites when a host of the run is in no site and dp_groups is "site" (else that
// host shows as "(no site)"). The names are the ranks' own (hostname or KEEL_HOST), which the
// labels must match.
Topology gather_topology(const CommGroup& world, const RunConfig& config);

// The topology from host names alone (one per world rank), for tests and gather_topology.
Topology topology_of(const std::vector<std::string>& host_of_rank, const RunConfig& config);

// The data-parallel groups of parallel.dp_groups for one dp group (members: the world ranks of
// its dp ranks 0..dp-1): each member's inner group (0-based, in order of first appearance) and
// its place in it. Throws KeelError (KEEL_ERR_INVALID_CONFIG) unless every inner group holds the
// same number of members, naming the level and the counts; kFlat gives one group of all.
struct DpGroupPlan {
  std::vector<int32_t> group_of;  // dp rank -> inner group
  std::vector<int32_t> place_of;  // dp rank -> place in its inner group
  int32_t groups = 1, group_size = 1;
};
DpGroupPlan plan_dp_groups(const RunConfig& config, const Topology& topology, const std::vector<int32_t>& members);

// "host", "site", "4 consecutive dp ranks"
std::string describe_dp_groups(const RunConfig& config);

// What `keel validate` and a run both check of parallel.dp_groups before any host is known (ep
// 1; N dividing dp), and the levels in words for the plan's line ("" when flat). Throws
// KeelError (KEEL_ERR_INVALID_CONFIG) naming the key.
std::string check_dp_levels(const RunConfig& config, const MeshLayout& layout);

}  // namespace keel
