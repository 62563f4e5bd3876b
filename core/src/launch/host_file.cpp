// Reading the hosts file (see host_file.h).
#include "launch/host_file.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "host/errors.h"
#include "io/regular_file.h"

namespace keel {
namespace {

constexpr size_t kMaxHosts = 65536;
constexpr size_t kMaxFileBytes = 16 << 20;
constexpr int32_t kMaxSlots = 4096;
constexpr size_t kMaxNameLength = 253;  // a DNS name's limit

}  // namespace

bool plain_host_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength || name[0] == '-') return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return false;
  return true;
}

std::vector<LaunchHost> read_host_file(const std::string& path) {
  const std::vector<unsigned char> bytes = read_regular_file(path, "the hosts file", Symlinks::follow, kMaxFileBytes);
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  std::vector<LaunchHost> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    LaunchHost host;
    if (!(words >> host.name)) continue;
    if (!plain_host_name(host.name))
      throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "expected a host name or IPv4 address (letters, digits, . - _, "
                                                       "not starting with -; slots go in slots=N), found '" + host.name.substr(0, 64) + "'");
    for (std::string word; words >> word;) {
      if (word.rfind("site=", 0) == 0) {
        host.site = word.substr(5);
        if (!plain_host_name(host.site))
          throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "expected a site name after site= (letters, digits, . - _, "
                                                           "not starting with -), found '" + host.site.substr(0, 64) + "'");
        continue;
      }
      if (word.rfind("slots=", 0) != 0)
        throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "expected slots=N or site=NAME after the host name, found '" +
                                                     word.substr(0, 64) + "'");
      const std::string count = word.substr(6);
      char* end = nullptr;
      const long slots = std::strtol(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || slots < 1 || slots > kMaxSlots)
        throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "slots must be a whole number from 1 to " +
                                                     std::to_string(kMaxSlots) + ", found '" + count.substr(0, 32) + "'");
      host.slots = int32_t(slots);
    }
    // Host names are case-insensitive (RFC 4343): LOCALHOST and localhost are one host.
    auto lower = [](std::string name) {
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      return name;
    };
    for (const LaunchHost& seen : hosts)
      if (lower(seen.name) == lower(host.name))
        throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "host " + host.name + " is listed twice" +
                                                     (seen.name == host.name ? "" : " (as " + seen.name + " before; host names ignore case)"));
    if (hosts.size() == kMaxHosts)
      throw KeelError(KEEL_ERR_INVALID_CONFIG, where + "more than " + std::to_string(kMaxHosts) + " hosts");
    hosts.push_back(host);
  }
  if (hosts.empty()) throw KeelError(KEEL_ERR_INVALID_CONFIG, path + ": the hosts file names no host");
  return hosts;
}

std::string sites_override(const std::vector<LaunchHost>& hosts, const std::string& path) {
  nlohmann::json sites = nlohmann::json::object();
  const LaunchHost* unlabelled = nullptr;
  for (const LaunchHost& host : hosts) {
    if (host.site.empty()) {
      unlabelled = unlabelled ? unlabelled : &host;
      continue;
    }
    sites[host.site].push_back(host.name);
  }
  if (sites.empty()) return "";
  if (unlabelled)
    throw KeelError(KEEL_ERR_INVALID_CONFIG, path + ": host " + unlabelled->name + " names no site= while others do; "
                                                    "give every host its site, or none");
  return "parallel.sites=" + sites.dump();
}

std::string host_list(const std::vector<LaunchHost>& hosts, int32_t ranks) {
  std::string list;
  for (const LaunchHost& host : hosts) {
    if (ranks <= 0) break;
    const int32_t here = std::min(ranks, host.slots);
    list += (list.empty() ? "" : ",") + host.name + ":" + std::to_string(here);
    ranks -= here;
  }
  return list;
}

}  // namespace keel
