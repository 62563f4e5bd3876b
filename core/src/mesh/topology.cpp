// Each rank's host and site (topology.h), and the data-parallel groups they make.
#include "mesh/topology.h"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <map>

#include "host/errors.h"
#include "launch/host_file.h"
#include "mesh/collectives.h"

namespace keel {
namespace {

std::string ranks_text(const std::vector<int32_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// Index of `name` in `names`, appended when new.
int32_t index_of(std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return int32_t(i);
  names.push_back(name);
  return int32_t(names.size() - 1);
}

}  // namespace

std::string this_host_name() {
  if (const char* named = std::getenv("KEEL_HOST"); named && *named) {
    if (!plain_host_name(named))
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, std::string("KEEL_HOST: expected a host name (letters, digits, . - _, "
                                                             "not starting with -), found '") +
                                                     std::string(named).substr(0, 64) + "'");
    return named;
  }
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

Topology topology_of(const std::vector<std::string>& host_of_rank, const RunConfig& config) {
  Topology t;
  for (const std::string& host : host_of_rank) t.host_of.push_back(index_of(t.hosts, host));
  std::vector<int32_t> site_of_host;
  for (const std::string& host : t.hosts) {
    if (config.site_of_host.empty()) {
      site_of_host.push_back(index_of(t.sites, ""));
      continue;
    }
    const std::string* site = nullptr;
    for (const auto& [listed, in] : config.site_of_host)
      if (listed == host) site = &in;
    if (!site && config.dp_groups != RunConfig::DpGroups::kSite) {  // shown as unsited; only "site" needs it
      site_of_host.push_back(index_of(t.sites, "(no site)"));
      continue;
    }
    if (!site) {
      std::vector<int32_t> ranks;
      for (size_t r = 0; r < host_of_rank.size(); ++r)
        if (host_of_rank[r] == host) ranks.push_back(int32_t(r));
      throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel.sites: host " + host + " (" +
                                                   ranks_text(ranks) + ") is in no site; list it under one");
    }
    site_of_host.push_back(index_of(t.sites, *site));
  }
  for (int32_t host : t.host_of) t.site_of.push_back(site_of_host[size_t(host)]);
  return t;
}

Topology gather_topology(const CommGroup& world, const RunConfig& config) {
  std::string name;
  std::exception_ptr failure;
  try {
    name = this_host_name();
  } catch (...) {
    failure = std::current_exception();  // every rank learns of it before the gather, so none waits there
  }
  rethrow_if_any_failed(world, failure, KEEL_ERR_INVALID_ARGUMENT, "another rank's host name was refused (KEEL_HOST)");
  return topology_of(gather_strings(world, name), config);
}

std::string Topology::describe() const {
  auto host_part = [&](size_t h) {
    std::vector<int32_t> ranks;
    for (size_t r = 0; r < host_of.size(); ++r)
      if (host_of[r] == int32_t(h)) ranks.push_back(int32_t(r));
    return hosts[h] + ": " + ranks_text(ranks);
  };
  auto hosts_of_site = [&](size_t s) {
    std::string text;
    for (size_t h = 0; h < hosts.size(); ++h) {
      bool in = false;
      for (size_t r = 0; r < host_of.size(); ++r) in = in || (host_of[r] == int32_t(h) && site_of[r] == int32_t(s));
      if (in) text += (text.empty() ? "" : "; ") + host_part(h);
    }
    return text;
  };
  const std::string count = std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  if (sites.size() == 1 && sites[0].empty()) return count + " (" + hosts_of_site(0) + ")";
  std::string text = std::to_string(sites.size()) + (sites.size() == 1 ? " site, " : " sites, ") + count + ":";
  for (size_t s = 0; s < sites.size(); ++s)
    text += (s ? ", site " : " site ") + sites[s] + " (" + hosts_of_site(s) + ")";
  return text;
}

std::string describe_dp_groups(const RunConfig& config) {
  switch (config.dp_groups) {
    case RunConfig::DpGroups::kHost: return "host";
    case RunConfig::DpGroups::kSite: return "site";
    case RunConfig::DpGroups::kRanks: return std::to_string(config.dp_group_ranks) + " consecutive dp ranks";
    case RunConfig::DpGroups::kFlat: break;
  }
  return "flat";
}

std::string check_dp_levels(const RunConfig& config, const MeshLayout& layout) {
  if (config.dp_groups == RunConfig::DpGroups::kFlat) return "";
  if (layout.ep > 1)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, config.file + ": parallel.dp_groups: the experts' data-parallel groups "
                                                           "are not split by level yet; use parallel.ep 1 or dp_groups \"flat\"");
  if (config.dp_groups == RunConfig::DpGroups::kRanks) {
    std::vector<int32_t> members(size_t(layout.dp));
    for (int32_t d = 0; d < layout.dp; ++d) members[size_t(d)] = d;
    Topology one_host;  // N consecutive dp ranks: no host or site enters the plan
    one_host.hosts = {"h"};
    one_host.host_of.assign(size_t(layout.dp), 0);
    one_host.site_of.assign(size_t(layout.dp), 0);
    const DpGroupPlan plan = plan_dp_groups(config, one_host, members);
    return "data-parallel groups of " + std::to_string(plan.group_size) + " ranks (" + std::to_string(plan.groups) +
           " groups)";
  }
  return "data-parallel groups by " + describe_dp_groups(config) + " (the hosts are learnt at start)";
}

DpGroupPlan plan_dp_groups(const RunConfig& config, const Topology& topology, const std::vector<int32_t>& members) {
  const int32_t dp = int32_t(members.size());
  DpGroupPlan plan;
  plan.group_of.assign(size_t(dp), 0);
  plan.place_of.assign(size_t(dp), 0);
  const std::string key = config.file + ": parallel.dp_groups";
  if (config.dp_groups == RunConfig::DpGroups::kFlat) {
    for (int32_t i = 0; i < dp; ++i) plan.place_of[size_t(i)] = i;
    plan.group_size = dp;
    return plan;
  }
  if (config.dp_groups == RunConfig::DpGroups::kRanks) {
    const int32_t n = config.dp_group_ranks;
    if (dp % n != 0)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, key + ": groups of " + std::to_string(n) +
                                                   " dp ranks do not divide the data-parallel group of " +
                                                   std::to_string(dp));
    for (int32_t i = 0; i < dp; ++i) plan.group_of[size_t(i)] = i / n, plan.place_of[size_t(i)] = i % n;
    plan.groups = dp / n;
    plan.group_size = n;
    return plan;
  }
  const bool by_site = config.dp_groups == RunConfig::DpGroups::kSite;
  const std::vector<int32_t>& level = by_site ? topology.site_of : topology.host_of;
  const std::vector<std::string>& names = by_site ? topology.sites : topology.hosts;
  std::map<int32_t, int32_t> group_of_key, size_of_group;
  for (int32_t i = 0; i < dp; ++i) {
    const int32_t where = level.at(size_t(members[size_t(i)]));
    const auto found = group_of_key.try_emplace(where, int32_t(group_of_key.size())).first->second;
    plan.group_of[size_t(i)] = found;
    plan.place_of[size_t(i)] = size_of_group[found]++;
  }
  plan.groups = int32_t(group_of_key.size());
  plan.group_size = size_of_group[0];
  for (const auto& [where, group] : group_of_key)
    if (size_of_group[group] != plan.group_size) {
      std::string counts;
      for (const auto& [w, g] : group_of_key)
        counts += (counts.empty() ? "" : ", ") + std::to_string(size_of_group[g]) + " on " + names[size_t(w)];
      throw KeelError(KEEL_ERR_INVALID_CONFIG, key + ": \"" + describe_dp_groups(config) + "\" needs the same number of " +
                                                   "a data-parallel group's ranks on every " + describe_dp_groups(config) +
                                                   ", found " + counts);
    }
  return plan;
}

}  // namespace keel
