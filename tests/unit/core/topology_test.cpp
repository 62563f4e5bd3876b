// mesh/topology.h and launch/host_file.h's sites: each rank's host and site, the data-parallel
// groups parallel.dp_groups makes of them, and the refusals that name the key and the counts.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "host/errors.h"
#include "launch/host_file.h"
#include "mesh/topology.h"

namespace {

keel::RunConfig config_of(const std::string& parallel) {
  return keel::RunConfig::from_json_text(R"({"model": {"plugin": "gpt"}, "parallel": )" + parallel + "}", "test.json");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const keel::KeelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(Topology, HostsAndSitesInRankOrder) {
  const keel::RunConfig c = config_of(R"({"sites": {"east": ["h2", "h1"], "west": ["h3"]}})");
  const keel::Topology t = keel::topology_of({"h1", "h3", "h1", "h3", "h2"}, c);
  EXPECT_EQ(t.hosts, (std::vector<std::string>{"h1", "h3", "h2"}));
  EXPECT_EQ(t.sites, (std::vector<std::string>{"east", "west"}));
  EXPECT_EQ(t.host_of, (std::vector<int32_t>{0, 1, 0, 1, 2}));
  EXPECT_EQ(t.site_of, (std::vector<int32_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(t.describe(), "2 sites, 3 hosts: site east (h1: ranks 0, 2; h2: rank 4), site west (h3: ranks 1, 3)");
  EXPECT_EQ(keel::topology_of({"a", "a"}, config_of("{}")).describe(), "1 host (a: ranks 0, 1)");
}

TEST(Topology, AHostInNoSiteIsNamedWhereSitesMakeTheGroups) {
  const keel::RunConfig by_site = config_of(R"({"dp_groups": "site", "sites": {"east": ["h1"]}})");
  EXPECT_EQ(error_of([&] { keel::topology_of({"h1", "h9", "h9"}, by_site); }),
            "test.json: parallel.sites: host h9 (ranks 1, 2) is in no site; list it under one");
  // Elsewhere it is shown unsited, and groups of N consecutive ranks ignore the sites.
  const keel::RunConfig by_count = config_of(R"({"dp_groups": 2, "sites": {"east": ["h1"]}})");
  EXPECT_EQ(keel::topology_of({"h1", "h9"}, by_count).describe(),
            "2 sites, 2 hosts: site east (h1: rank 0), site (no site) (h9: rank 1)");
  keel::MeshLayout layout;
  layout.ranks = layout.dp = 4;
  EXPECT_EQ(keel::check_dp_levels(by_count, layout), "data-parallel groups of 2 ranks (2 groups)");
}

TEST(Topology, GroupsByHostSiteOrCount) {
  const keel::Topology t = keel::topology_of({"h1", "h2", "h1", "h2"},
                                             config_of(R"({"sites": {"a": ["h1"], "b": ["h2"]}})"));
  const keel::DpGroupPlan by_host = keel::plan_dp_groups(config_of(R"({"dp_groups": "host"})"), t, {0, 1, 2, 3});
  EXPECT_EQ(by_host.group_of, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(by_host.place_of, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(by_host.groups, 2);
  EXPECT_EQ(by_host.group_size, 2);
  // A dp group of some ranks only (another tp place): world ranks 1 and 3, both on h2.
  const keel::DpGroupPlan part = keel::plan_dp_groups(config_of(R"({"dp_groups": "host"})"), t, {1, 3});
  EXPECT_EQ(part.groups, 1);
  EXPECT_EQ(part.group_size, 2);
  const keel::DpGroupPlan by_count = keel::plan_dp_groups(config_of(R"({"dp_groups": 2})"), t, {0, 1, 2, 3});
  EXPECT_EQ(by_count.group_of, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(by_count.place_of, (std::vector<int32_t>{0, 1, 0, 1}));
  const keel::DpGroupPlan flat = keel::plan_dp_groups(config_of("{}"), t, {0, 1, 2, 3});
  EXPECT_EQ(flat.groups, 1);
  EXPECT_EQ(flat.group_size, 4);
}

TEST(Topology, UnevenGroupsAreRefusedWithTheirCounts) {
  const keel::Topology t = keel::topology_of({"h1", "h1", "h1", "h2"}, config_of("{}"));
  EXPECT_EQ(error_of([&] { keel::plan_dp_groups(config_of(R"({"dp_groups": "host"})"), t, {0, 1, 2, 3}); }),
            "test.json: parallel.dp_groups: \"host\" needs the same number of a data-parallel group's ranks on every "
            "host, found 3 on h1, 1 on h2");
  EXPECT_EQ(error_of([&] { keel::plan_dp_groups(config_of(R"({"dp_groups": 3})"), t, {0, 1, 2, 3}); }),
            "test.json: parallel.dp_groups: groups of 3 dp ranks do not divide the data-parallel group of 4");
}

TEST(Topology, BadKeysAreRefused) {
  EXPECT_NE(error_of([] { config_of(R"({"dp_groups": "rack"})"); }).find("parallel.dp_groups"), std::string::npos);
  EXPECT_NE(error_of([] { config_of(R"({"dp_groups": 0})"); }).find("parallel.dp_groups"), std::string::npos);
  EXPECT_NE(error_of([] { config_of(R"({"dp_groups": "site"})"); }).find("needs parallel.sites"), std::string::npos);
  EXPECT_NE(error_of([] { config_of(R"({"sites": {"a": ["h1"], "b": ["h1"]}})"); }).find("already in site a"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_of(R"({"sites": {"a": ["-x"]}})"); }).find("parallel.sites.a[0]"), std::string::npos);
  EXPECT_NE(error_of([] { config_of(R"({"sites": ["h1"]})"); }).find("expected an object"), std::string::npos);
}

TEST(Topology, HostsFileSitesBecomeTheOverride) {
  std::vector<keel::LaunchHost> hosts{{"h1", 2, "east"}, {"h2", 2, "west"}, {"h3", 1, "east"}};
  EXPECT_EQ(keel::sites_override(hosts, "hosts"), R"(parallel.sites={"east":["h1","h3"],"west":["h2"]})");
  hosts[1].site.clear();
  EXPECT_EQ(error_of([&] { keel::sites_override(hosts, "hosts"); }),
            "hosts: host h2 names no site= while others do; give every host its site, or none");
  EXPECT_EQ(keel::sites_override({{"h1", 1, ""}}, "hosts"), "");
}

}  // namespace
