// Bootstrap: launcher environments (torchrun, Open MPI, Slurm) and the store rendezvous.
#include "core/runtime/bootstrap.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <thread>

#include "core/runtime/socket_util.h"

namespace ferry {
namespace {

TEST(BootstrapTest, Torchrun) {
  auto info = BootstrapFromEnvironment({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"},
                                        {"MASTER_PORT", "29500"}, {"FERRY_TOKEN", "t"}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->launcher, "torchrun");
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_size, 2);
  EXPECT_EQ(info->store_host, "node7");
  EXPECT_EQ(info->store_port, 29500);
  EXPECT_EQ(info->token, "t");
}

TEST(BootstrapTest, OpenMpiAndSlurmWithFerryStoreAddress) {
  auto mpi = BootstrapFromEnvironment({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"FERRY_STORE_ADDR", "10.0.0.1"}, {"FERRY_STORE_PORT", "4000"},
                                       {"FERRY_TOKEN", "x"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status().ToString();
  EXPECT_EQ(mpi->launcher, "openmpi");
  EXPECT_EQ(mpi->rank, 5);
  EXPECT_EQ(mpi->size, 6);
  EXPECT_EQ(mpi->store_host, "10.0.0.1");
  EXPECT_EQ(mpi->store_port, 4000);
  auto slurm = BootstrapFromEnvironment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                         {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "h"},
                                         {"MASTER_PORT", "1234"}, {"FERRY_TOKEN", "x"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm->launcher, "slurm");
  EXPECT_EQ(slurm->size, 2);
}

TEST(BootstrapTest, FerryReplacementMarksAReplacementProcess) {
  std::map<std::string, std::string> env = {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"},
                                            {"MASTER_PORT", "1"}, {"FERRY_TOKEN", "t"}};
  EXPECT_FALSE(BootstrapFromEnvironment(env)->replacement);
  env["FERRY_REPLACEMENT"] = "1";
  EXPECT_TRUE(BootstrapFromEnvironment(env)->replacement);
  env["FERRY_REPLACEMENT"] = "0";
  EXPECT_FALSE(BootstrapFromEnvironment(env)->replacement);
  env["FERRY_REPLACEMENT"] = "yes please";
  auto bad = BootstrapFromEnvironment(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("FERRY_REPLACEMENT"), std::string::npos);
}

TEST(BootstrapTest, ClearErrors) {
  auto none = BootstrapFromEnvironment({});
  EXPECT_NE(none.status().message().find("torchrun"), std::string::npos);
  auto no_token = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"},
                                            {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(no_token.status().message().find("FERRY_TOKEN"), std::string::npos);
  auto bad_rank = BootstrapFromEnvironment({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"},
                                            {"MASTER_PORT", "1"}, {"FERRY_TOKEN", "t"}});
  EXPECT_NE(bad_rank.status().message().find("RANK=4"), std::string::npos);
  auto bad_port = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"},
                                            {"MASTER_PORT", "http"}, {"FERRY_TOKEN", "t"}});
  EXPECT_NE(bad_port.status().message().find("MASTER_PORT"), std::string::npos);
  auto no_addr = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"},
                                           {"MASTER_PORT", "1"}, {"FERRY_TOKEN", "t"}});
  EXPECT_NE(no_addr.status().message().find("MASTER_ADDR"), std::string::npos);
}

TEST(BootstrapTest, RendezvousRankZeroHostsAndOthersJoin) {
  auto probe = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  int port = probe->port;
  ::close(probe->fd);
  BootstrapInfo info;
  info.size = 2;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "tok";
  Result<Rendezvous> joined = Unavailable("not yet");
  std::thread other([&] {
    BootstrapInfo mine = info;
    mine.rank = 1;
    joined = StartRendezvous(mine, Deadline::AfterSeconds(10));
  });
  auto host = StartRendezvous(info, Deadline::AfterSeconds(10));
  other.join();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_NE(host->server, nullptr);
  EXPECT_EQ(joined->server, nullptr);
  ASSERT_TRUE(joined->store->Set("k", Bytes{1, 2}, Deadline::AfterSeconds(5)).ok());
  auto value = host->store->Get("k", Deadline::AfterSeconds(5));
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, (Bytes{1, 2}));
}

// With FERRY_STORE_EXTERNAL=1 rank 0 starts no server: it connects to the store another process
// serves, like every other rank (and fails by the deadline, naming it, while none serves).
TEST(BootstrapTest, WithAnExternalStoreRankZeroOnlyConnects) {
  std::map<std::string, std::string> env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", "1"}, {"FERRY_TOKEN", "tok"}};
  EXPECT_FALSE(BootstrapFromEnvironment(env)->store_external);
  env["FERRY_STORE_EXTERNAL"] = "yes";
  EXPECT_NE(BootstrapFromEnvironment(env).status().message().find("FERRY_STORE_EXTERNAL"), std::string::npos);
  env["FERRY_STORE_EXTERNAL"] = "1";
  auto probe = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int port = probe->port;
  ::close(probe->fd);
  env["MASTER_PORT"] = std::to_string(port);
  Result<BootstrapInfo> info = BootstrapFromEnvironment(env);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->store_external);
  auto alone = StartRendezvous(*info, Deadline::AfterSeconds(0.3));
  ASSERT_FALSE(alone.ok()) << "rank 0 must not have hosted the store";
  EXPECT_NE(alone.status().message().find("external store"), std::string::npos) << alone.status().ToString();
  auto server = TcpStoreServer::Start("127.0.0.1", port, "tok");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto joined = StartRendezvous(*info, Deadline::AfterSeconds(5));
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->server, nullptr);
  EXPECT_EQ(*joined->store->Add("n", 1, Deadline::AfterSeconds(5)), 1);
  EXPECT_EQ((*server)->active(), 1);
}

// The store listens on the interface the job uses (loopback here), not on every interface: the
// host's other address does not reach it.
TEST(BootstrapTest, StoreListensOnlyOnTheJobsInterface) {
  std::string other = LocalAddress();
  if (other == "127.0.0.1") GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  auto probe = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  int port = probe->port;
  ::close(probe->fd);
  BootstrapInfo info;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "tok";
  auto host = StartRendezvous(info, Deadline::AfterSeconds(5));
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  auto outside = ConnectTcp(other, port, Deadline::AfterSeconds(0.3));
  EXPECT_FALSE(outside.ok()) << "the store answered on " << other;
  if (outside.ok()) ::close(*outside);
  EXPECT_FALSE(ListenTcp("", 0).ok()) << "an empty address must not mean every interface";
}

TEST(BootstrapTest, WorldSizesOverTheRankLimitAreRefused) {
  auto huge = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "500000"}, {"MASTER_ADDR", "h"},
                                        {"MASTER_PORT", "29500"}, {"FERRY_TOKEN", "t"}});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("kMaxRanks"), std::string::npos) << huge.status().ToString();
}

TEST(BootstrapTest, StoreBindComesFromFerryStoreBind) {
  auto info = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "node0"},
                                        {"MASTER_PORT", "29500"}, {"FERRY_TOKEN", "t"},
                                        {"FERRY_STORE_BIND", "10.0.0.5"}});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->store_bind, "10.0.0.5");
  auto plain = BootstrapFromEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "node0"},
                                         {"MASTER_PORT", "29500"}, {"FERRY_TOKEN", "t"}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->store_bind, "node0");
}

}  // namespace
}  // namespace ferry
