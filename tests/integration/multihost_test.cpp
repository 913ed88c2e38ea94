// Ranks on different hosts: two network namespaces joined by a veth pair, each with its
// own IPv4 and IPv6 address, stand in for two machines. Ranks 0-1 run in the first (where
// the coordinator listens, at either address), ranks 2-3 in the second; UCX may use only
// TCP over the veth link. Needs root and iproute2; skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/integration/command.hpp"
#include "tests/support/free_port.hpp"

namespace troupe {
namespace {

// Creates the two namespaces and the link on construction, removes them on destruction.
class TwoHosts {
 public:
  TwoHosts() : tag_(std::to_string(getpid() % 100000)) {
    a_ = "troupe-a-" + tag_;
    b_ = "troupe-b-" + tag_;
    std::string va = "tva" + tag_, vb = "tvb" + tag_;
    subnet_ = "10.213." + std::to_string(getpid() % 250 + 1);
    subnet6_ = "fd00:213:" + std::to_string(getpid() % 250 + 1);
    std::string script = "set -e; ip netns add " + a_ + "; ip netns add " + b_ + "; ip link add " + va +
                         " type veth peer name " + vb + "; ip link set " + va + " netns " + a_ +
                         "; ip link set " + vb + " netns " + b_ + "; ip -n " + a_ + " addr add " +
                         address_a() + "/24 dev " + va + "; ip -n " + b_ + " addr add " + address_b() +
                         "/24 dev " + vb + "; ip -n " + a_ + " addr add " + address_a6() + "/64 dev " + va +
                         " nodad; ip -n " + b_ + " addr add " + address_b6() + "/64 dev " + vb +
                         " nodad; ip -n " + a_ + " link set " + va + " up; ip -n " + b_ + " link set " + vb +
                         " up; ip -n " + a_ + " link set lo up; ip -n " + b_ + " link set lo up";
    auto r = testing::run_command(script, 30);
    ok_ = r.exit_code == 0;
    why_ = r.output;
    device_a_ = va;
    device_b_ = vb;
  }
  ~TwoHosts() { testing::run_command("ip netns del " + a_ + "; ip netns del " + b_, 30); }

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  std::string address_a() const { return subnet_ + ".1"; }
  std::string address_b() const { return subnet_ + ".2"; }
  std::string address_a6() const { return subnet6_ + "::1"; }
  std::string address_b6() const { return subnet6_ + "::2"; }

  // The command that runs `program` as `rank` of `world` on host a or b, the coordinator
  // at host a's `coordinator` address.
  std::string on(bool host_a, int rank, int world, const std::string& coordinator,
                 const std::string& program) const {
    return "ip netns exec " + (host_a ? a_ : b_) + " env TROUPE_RANK=" + std::to_string(rank) +
           " TROUPE_WORLD_SIZE=" + std::to_string(world) + " TROUPE_TEST_COORDINATOR_HOST=" + coordinator +
           " UCX_TLS=tcp,self UCX_NET_DEVICES=" + (host_a ? device_a_ : device_b_) + " " + program;
  }

 private:
  std::string tag_, a_, b_, subnet_, subnet6_, device_a_, device_b_, why_;
  bool ok_ = false;
};

// Runs a world of 4 collectives check with the coordinator at `coordinator` (an address of host a).
void check_collectives(const TwoHosts& hosts, const std::string& coordinator) {
  const int world = 4;
  // The coordinator listens in namespace a, where nothing else runs; a free port all the same.
  const std::string program =
      std::string(TRANSPORT_RANK_BINARY) + " " + std::to_string(testing::free_port()) + " 21";
  std::vector<testing::CommandResult> results(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back(
        [&, r] { results[r] = testing::run_command(hosts.on(r < 2, r, world, coordinator, program), 120); });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(results[r].exit_code, 0)
        << "rank " << r << " (coordinator " << coordinator << "): " << results[r].output;
    EXPECT_NE(results[r].output.find("all collectives match"), std::string::npos) << results[r].output;
  }
}

TEST(MultiHost, CollectivesAcrossTwoNamespacesOverTcpMatchExactSums) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root; this test runs as uid " << geteuid();
  TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "cannot make network namespaces here: " << hosts.why();
  check_collectives(hosts, hosts.address_a());
}

// Clusters that address their machines by IPv6 (a unique local fd00:: address here): the
// ranks of the other host join rank 0 there.
TEST(MultiHost, RanksJoinACoordinatorAtAnIpv6Address) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root; this test runs as uid " << geteuid();
  TwoHosts hosts;
  if (!hosts.ok()) GTEST_SKIP() << "cannot make network namespaces here: " << hosts.why();
  check_collectives(hosts, hosts.address_a6());
}

}  // namespace
}  // namespace troupe
