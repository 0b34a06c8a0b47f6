// Fault injection for `ferry run` (tools/cli/fault_injection.h): parsing the spec, and when a
// kill fires. Each firing case runs in a forked child, which must die of SIGKILL or exit 0
// within a deadline.
#include "tools/cli/fault_injection.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

namespace ferry::cli {
namespace {

// How a forked child running `body` ended: the signal that killed it, or 0 when it exited 0.
int SignalThatEnded(const std::function<void()>& body) {
  const pid_t child = fork();
  if (child == 0) {
    body();
    _exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "the child outlived its deadline";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  return 0;
}

Fault Parsed(const std::string& spec) {
  Result<Fault> fault = ParseFault(spec, "--inject-fault");
  EXPECT_TRUE(fault.ok()) << fault.status().message();
  return fault.ok() ? *fault : Fault{};
}

TEST(ParseFaultTest, ReadsRankKindMomentAndRefit) {
  const Fault mid = Parsed("2:kill:mid=3");
  EXPECT_EQ(mid.rank, 2);
  EXPECT_EQ(mid.signal, SIGKILL);
  EXPECT_TRUE(mid.mid_refit);
  EXPECT_EQ(mid.refit, 3);
  const Fault after = Parsed("1:stop:after=2");
  EXPECT_EQ(after.signal, SIGSTOP);
  EXPECT_FALSE(after.mid_refit);
  EXPECT_FALSE(after.at_verify);
  EXPECT_EQ(after.refit, 2);
  const Fault verify = Parsed("0:kill:verify=4");
  EXPECT_FALSE(verify.mid_refit);
  EXPECT_TRUE(verify.at_verify);
  EXPECT_EQ(verify.refit, 4);
  EXPECT_EQ(Parsed("").rank, -1);
}

TEST(ParseFaultTest, NamesWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"2:kill", "expected <rank>:<kill|stop>"}, {"x:kill:mid", "the rank is not a number"},
      {"2:hang:mid", "kill, stop or corrupt"},   {"2:kill:soon", "mid, between, mid=N, verify=N or after=N"},
      {"2:kill:after", "after=N"},               {"2:kill:mid=0", "a number from 1"},
      {"2:kill:verify", "verify=N"},             {"2:kill:verify=0", "a number from 1"},
      {"2:corrupt:mid", "corrupt happens at verify"},
  };
  for (const auto& [spec, message] : cases) {
    Result<Fault> fault = ParseFault(spec, "--inject-fault");
    ASSERT_FALSE(fault.ok()) << spec;
    EXPECT_NE(fault.status().message().find(message), std::string::npos) << spec << ": " << fault.status().message();
    EXPECT_NE(fault.status().message().find("--inject-fault='" + spec + "'"), std::string::npos);
  }
}

TEST(ParseFaultsTest, ReadsAListInItsOrderAndNamesTheWrongFault) {
  Result<std::vector<Fault>> two = ParseFaults("0:kill:mid=2,2:kill:after=3", "--inject-fault");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].rank, 0);
  EXPECT_TRUE((*two)[0].mid_refit);
  EXPECT_EQ((*two)[0].refit, 2);
  EXPECT_EQ((*two)[1].rank, 2);
  EXPECT_FALSE((*two)[1].mid_refit);
  EXPECT_EQ((*two)[1].refit, 3);
  EXPECT_TRUE(ParseFaults("", "--inject-fault")->empty());
  Result<std::vector<Fault>> bad = ParseFaults("1:kill:after=1,1:kill:later", "--inject-fault");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'1:kill:later'"), std::string::npos) << bad.status().message();
  EXPECT_NE(ParseFaults("1:kill:after=1,", "--inject-fault").status().message().find("empty fault"),
            std::string::npos);
  std::string many;
  for (int i = 0; i <= kMaxFaults; ++i) many += (i > 0 ? "," : "") + std::string("1:kill:after=1");
  EXPECT_NE(ParseFaults(many, "--inject-fault").status().message().find("kMaxFaults"), std::string::npos);
}

TEST(MaybeInjectFaultTest, AnAfterFaultKillsOnlyItsRankOnlyOnceItsRefitFinished) {
  const Fault fault = Parsed("2:kill:after=2");
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 2, false, 2); }), SIGKILL);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 2, true, 2); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 2, false, 1); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 1, false, 2); }), 0);
}

// A verify=N fault fires only at its own moment: neither as its refit starts nor once it ended.
TEST(MaybeInjectFaultTest, AVerifyFaultKillsItsRankOnlyAsItsRefitsTransfersEnd) {
  const Fault fault = Parsed("0:kill:verify=2");
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectAtVerify(fault, 0, 2); }), SIGKILL);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectAtVerify(fault, 0, 1); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectAtVerify(fault, 1, 2); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 0, true, 2); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 0, false, 2); }), 0);
}

TEST(MaybeInjectFaultTest, AMidFaultFiresAsItsRefitStarts) {
  const Fault fault = Parsed("2:kill:mid=2");
  EXPECT_EQ(SignalThatEnded([&] {
              MaybeInjectFault(fault, 2, true, 2);
              std::this_thread::sleep_for(std::chrono::seconds(10));
            }),
            SIGKILL);
}

// The thread that fires a `mid` fault may not have run by the time the refit ends (a loaded
// machine); the refit's end then fires it, so the kill never lands after the last refit.
TEST(MaybeInjectFaultTest, AMidFaultWhoseThreadHasNotRunFiresWhenItsRefitEnds) {
  const Fault fault = Parsed("2:kill:mid=2");
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 2, false, 2); }), SIGKILL);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 2, false, 1); }), 0);
  EXPECT_EQ(SignalThatEnded([&] { MaybeInjectFault(fault, 3, false, 2); }), 0);
}

}  // namespace
}  // namespace ferry::cli
