// The UDP heartbeat between ranks (see peer_liveness.hpp).
#include "peer_liveness.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

namespace keel_mpi {
namespace {

using Clock = std::chrono::steady_clock;

// How many missed heartbeats make a peer silent: one late datagram is not a failure.
constexpr double kSilentAfterIntervals = 3.0;
constexpr int kWatchAllUpTo = 64;
constexpr int kRingNeighbours = 32;
// The start-up line lists ranks by host for small worlds only.
constexpr size_t kListHostsUpTo = 8;
constexpr size_t kListRanksUpTo = 8;

// What each rank tells the others, gathered once; fixed size so one all-gather carries it.
struct PeerAddress {
  char host[64];
  uint32_t ipv4;  // network byte order
  uint16_t port;  // network byte order
  uint64_t nonce;
};

struct Heartbeat {
  uint64_t nonce;
  int32_t rank;
  int32_t unused;  // named, so no padding byte goes out uninitialised
};

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

bool is_loopback(uint32_t ipv4_network_order) { return (ntohl(ipv4_network_order) >> 24) == 127; }

// This host's address for peers: its hostname's IPv4 address unless that is loopback (Debian
// maps the hostname to 127.0.1.1), else the first non-loopback IPv4 interface that is up.
uint32_t own_address(const char* hostname) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(hostname, nullptr, &hints, &found) == 0) {
    for (addrinfo* a = found; a; a = a->ai_next) {
      const uint32_t ip = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr;
      if (!is_loopback(ip)) {
        freeaddrinfo(found);
        return ip;
      }
    }
    freeaddrinfo(found);
  }
  ifaddrs* interfaces = nullptr;
  uint32_t chosen = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&interfaces) == 0) {
    for (ifaddrs* i = interfaces; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      const uint32_t ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      if (!is_loopback(ip)) {
        chosen = ip;
        break;
      }
    }
    freeifaddrs(interfaces);
  }
  return chosen;
}

std::vector<int> watched_peers(int rank, int size) {
  std::vector<int> peers;
  if (size <= kWatchAllUpTo) {
    for (int r = 0; r < size; ++r)
      if (r != rank) peers.push_back(r);
    return peers;
  }
  for (int d = 1; d <= kRingNeighbours; ++d) {
    peers.push_back((rank + d) % size);
    peers.push_back((rank - d + size) % size);
  }
  return peers;
}

class PeerLiveness {
 public:
  PeerLiveness(int socket_fd, int rank, std::vector<PeerAddress> world, double interval_s)
      : socket_(socket_fd), rank_(rank), world_(std::move(world)), interval_s_(interval_s),
        peers_(watched_peers(rank, int(world_.size()))), last_heard_ns_(world_.size()) {
    const int64_t start = now_ns();
    for (auto& t : last_heard_ns_) t.store(start);
    thread_ = std::thread([this] { run(); });
  }

  ~PeerLiveness() {
    stopping_ = true;
    thread_.join();
    close(socket_);
  }

  std::string report() const {
    const int64_t now = now_ns();
    const double silent_after = kSilentAfterIntervals * interval_s_;
    std::map<std::string, std::vector<int>> silent_by_host;
    double longest = 0;
    for (int peer : peers_) {
      const double age = double(now - last_heard_ns_[peer].load()) * 1e-9;
      if (age <= silent_after) continue;
      silent_by_host[world_[peer].host].push_back(peer);
      longest = std::max(longest, age);
    }
    if (silent_by_host.empty())
      return peers_.size() + 1 == world_.size()
                 ? "every peer still answers heartbeats: a rank is alive but did not call this"
                 : "the " + std::to_string(peers_.size()) + " peers this rank watches of " +
                       std::to_string(world_.size()) + " still answer heartbeats";
    std::ostringstream text;
    text.precision(3);
    text << "no heartbeat for up to " << longest << " s from ";
    bool first_host = true;
    for (const auto& [host, ranks] : silent_by_host) {
      text << (first_host ? "" : "; ") << "host " << host << " (rank" << (ranks.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < ranks.size(); ++i) text << (i ? ", " : "") << ranks[i];
      text << ")";
      first_host = false;
    }
    text << ": unreachable or stopped";
    return text.str();
  }

 private:
  void run() {
    const auto interval = std::chrono::duration<double>(interval_s_);
    auto next_send = Clock::now();
    while (!stopping_) {
      if (Clock::now() >= next_send) {
        send_heartbeats();
        // After a stall (a stopped process), one round, not one per interval missed.
        next_send = std::max(next_send + std::chrono::duration_cast<Clock::duration>(interval), Clock::now());
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_send - Clock::now()).count();
      pollfd readable{socket_, POLLIN, 0};
      // At most 100 ms, so a stop is noticed quickly.
      if (poll(&readable, 1, int(std::max<int64_t>(0, std::min<int64_t>(wait, 100)))) > 0) receive_heartbeats();
    }
  }

  void send_heartbeats() {
    const Heartbeat beat{world_[rank_].nonce, rank_, 0};
    for (int peer : peers_) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = world_[peer].ipv4;
      to.sin_port = world_[peer].port;
      // Losing a datagram is what the heartbeat measures: errors (an unreachable network) are not ours to report.
      (void)sendto(socket_, &beat, sizeof(beat), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    }
  }

  void receive_heartbeats() {
    Heartbeat beat{};
    // MSG_TRUNC: a datagram of another size reports its own length, and is skipped.
    for (ssize_t got; (got = recv(socket_, &beat, sizeof(beat), MSG_DONTWAIT | MSG_TRUNC)) >= 0;) {
      if (got != ssize_t(sizeof(beat))) continue;
      if (beat.nonce != world_[rank_].nonce || beat.rank < 0 || beat.rank >= int(world_.size())) continue;
      last_heard_ns_[beat.rank].store(now_ns());
    }
  }

  int socket_;
  int rank_;
  std::vector<PeerAddress> world_;
  double interval_s_;
  std::vector<int> peers_;
  std::vector<std::atomic<int64_t>> last_heard_ns_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

std::atomic<PeerLiveness*> g_liveness{nullptr};
bool g_liveness_started = false;               // once per process: the first world starts it
std::vector<std::string> g_host_of;   // by world rank, gathered when it started

}  // namespace

void start_peer_liveness(MPI_Comm world, double interval_s) {
  if (g_liveness_started) return;
  g_liveness_started = true;
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  PeerAddress mine{};
  if (gethostname(mine.host, sizeof(mine.host) - 1) != 0) std::snprintf(mine.host, sizeof(mine.host), "?");
  int fd = -1;
  if (interval_s > 0) {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    socklen_t length = sizeof(any);
    if (fd >= 0 && (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
                    getsockname(fd, reinterpret_cast<sockaddr*>(&any), &length) != 0)) {
      close(fd);
      fd = -1;
    }
    if (fd >= 0) {
      mine.ipv4 = own_address(mine.host);
      mine.port = any.sin_port;
      mine.nonce = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ uint64_t(now_ns());
    }
  }
  // Every rank takes part, also one whose socket failed (port 0) or whose heartbeat is off.
  std::vector<PeerAddress> everyone(size);
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, everyone.data(), sizeof(mine), MPI_BYTE, world);
  for (auto& peer : everyone) {
    peer.host[sizeof(peer.host) - 1] = '\0';
    peer.nonce = everyone[0].nonce;
    g_host_of.emplace_back(peer.host);
  }
  bool all_listening = interval_s > 0;
  for (const auto& peer : everyone) all_listening = all_listening && peer.port != 0;
  if (!all_listening) {  // every rank sees the same table, so every rank turns it off alike
    if (fd >= 0) close(fd);
    return;
  }
  g_liveness.store(new PeerLiveness(fd, rank, std::move(everyone), interval_s));
}

void stop_peer_liveness() { delete g_liveness.exchange(nullptr); }

std::string world_hosts_summary() {
  std::map<std::string, std::vector<int>> ranks_of;
  for (size_t r = 0; r < g_host_of.size(); ++r) ranks_of[g_host_of[r]].push_back(int(r));
  std::ostringstream text;
  text << ranks_of.size() << (ranks_of.size() == 1 ? " host" : " hosts");
  if (ranks_of.size() > kListHostsUpTo) return text.str();
  text << " (";
  bool first_host = true;
  for (const auto& [host, ranks] : ranks_of) {
    text << (first_host ? "" : "; ") << host << ": rank" << (ranks.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks.size() && i < kListRanksUpTo; ++i) text << (i ? ", " : "") << ranks[i];
    if (ranks.size() > kListRanksUpTo) text << ", … " << ranks.size() << " in all";
    first_host = false;
  }
  text << ")";
  return text.str();
}

std::string peer_liveness_report() {
  const PeerLiveness* liveness = g_liveness.load();
  return liveness ? liveness->report() : "";
}

}  // namespace keel_mpi
