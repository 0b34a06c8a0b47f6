// `ferry config`: lists core and linked transports' options, applies the environment, and rejects
// a bad YAML file with exit code 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tools/cli/commands.h"

namespace ferry::cli {
namespace {

int RunConfig(std::vector<std::string> args, std::string* out) {
  CLI::App app{"ferry"};
  int exit_code = -1;
  AddConfigCommand(app, &exit_code);
  std::vector<const char*> argv = {"ferry", "config"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  ::testing::internal::CaptureStdout();
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  *out = ::testing::internal::GetCapturedStdout();
  return exit_code;
}

TEST(CmdConfigTest, PrintsEveryOptionWithDefaultsAndEnvironmentOverrides) {
  ::setenv("FERRY_TRANSPORT_NETWORK", "local", 1);
  std::string out;
  EXPECT_EQ(RunConfig({}, &out), 0);
  ::unsetenv("FERRY_TRANSPORT_NETWORK");
  EXPECT_NE(out.find("transport.network = local   (from env)"), std::string::npos) << out;
  EXPECT_NE(out.find("FERRY_TRANSPORT_INTRA_NODE"), std::string::npos);
  EXPECT_NE(out.find("executor.staging_budget"), std::string::npos);
  EXPECT_NE(out.find("planner.fanout_chunk_bytes = 16MiB"), std::string::npos) << "planner options are listed";
  EXPECT_NE(out.find("tcp.address"), std::string::npos) << "transport options are listed too";
  EXPECT_NE(out.find("transports linked in: fault, libfabric, local, nccl, tcp, ucx"), std::string::npos) << out;
  EXPECT_NE(out.find("fault.action = none"), std::string::npos) << "the fault transport's options too";
  EXPECT_NE(out.find("ucx.strict_tls = false"), std::string::npos) << out;
  EXPECT_NE(out.find("nccl.library = libnccl.so.2"), std::string::npos) << out;
  EXPECT_NE(out.find("FERRY_STORE_EXTERNAL"), std::string::npos) << "the bootstrap variables are listed";
  EXPECT_NE(out.find("FERRY_REPLACEMENT"), std::string::npos) << out;
}

TEST(CmdConfigTest, AppliesAYamlFileAndRejectsUnknownOptions) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/ferry.yaml";
  std::ofstream(path) << "planner:\n  network_chunk_bytes: 16MiB\n";
  std::string out;
  EXPECT_EQ(RunConfig({"--file", path, "--no-env"}, &out), 0);
  EXPECT_NE(out.find("planner.network_chunk_bytes = 16MiB   (from yaml)"), std::string::npos) << out;
  std::ofstream(path) << "executor:\n  chunk_bytes: 16MiB\n";
  EXPECT_EQ(RunConfig({"--file", path}, &out), 2);
}

// A value that parses as text but that a plan or session refuses is reported by `ferry config`,
// not first by the run that reads it.
TEST(CmdConfigTest, RejectsValuesAPlanOrSessionWouldRefuse) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/values.yaml";
  std::string out;
  for (const char* yaml : {"planner:\n  hierarchical: maybe\n", "executor:\n  copy_threads: 1000\n",
                           "deadline:\n  abort: 0s\n"}) {
    SCOPED_TRACE(yaml);
    std::ofstream(path) << yaml;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(RunConfig({"--file", path, "--no-env"}, &out), 2);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("ferry config: option '"), std::string::npos) << err;
    EXPECT_EQ(err.find("INVALID_ARGUMENT"), std::string::npos) << err;
  }
  std::ofstream(path) << "planner:\n  hierarchcal: false\n";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunConfig({"--file", path, "--no-env"}, &out), 2);
  const std::string typo = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(typo.rfind("ferry config: " + path + ": config YAML: unknown option 'planner.hierarchcal'", 0), 0)
      << typo;
  std::ofstream(path) << "planner:\n  hierarchical: false\n";
  EXPECT_EQ(RunConfig({"--file", path, "--no-env"}, &out), 0);
}

}  // namespace
}  // namespace ferry::cli
