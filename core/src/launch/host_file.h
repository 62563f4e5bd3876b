// The hosts file of `keel launch`: one host per line, in the form OpenMPI's hostfiles use
// ("node07 slots=4"; slots default 1), optionally with the host's site ("node07 slots=4
// site=east": parallel.sites, for the data-parallel group's levels), blank lines and # comments
// ignored. Untrusted input: a
// name must be a plain host name or IPv4 address (no ':', so no "host:N" slot count of its own)
// and every count is bounded, so nothing read here
// can smuggle options or shell words into the launcher's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct LaunchHost {
  std::string name;
  int32_t slots = 1;
  std::string site;  // "" when the line names none
};

// A host or site name as the hosts file, parallel.sites and KEEL_HOST take it: letters, digits,
// . - _, not starting with -, at most 253 characters (a DNS name's limit).
bool plain_host_name(const std::string& name);

// Throws KeelError naming FILE:LINE and what was expected.
std::vector<LaunchHost> read_host_file(const std::string& path);

// The hosts' site= labels as a parallel.sites override ("parallel.sites={...}"), or "" when no
// line names a site; throws KeelError naming the file when some lines name one and others not.
std::string sites_override(const std::vector<LaunchHost>& hosts, const std::string& path);

// "a:2,b:2": mpirun's --host value for these hosts, taking `ranks` slots in their order.
std::string host_list(const std::vector<LaunchHost>& hosts, int32_t ranks);

}  // namespace keel
