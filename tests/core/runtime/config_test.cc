// Config over the runtime's option tables: defaults, YAML loading, FERRY_* overrides, typed getters,
// the listing, and transports contributing their options.
#include "core/base/config.h"

#include <gtest/gtest.h>

#include "core/runtime/executor_options.h"
#include "core/runtime/runtime_options.h"
#include "core/runtime/transport.h"

namespace ferry {
namespace {

TEST(ConfigTest, DefaultsYamlThenEnvironmentWins) {
  Config config = RuntimeConfig();
  EXPECT_EQ(*config.GetString("transport.network"), "tcp");
  ASSERT_TRUE(config.LoadYamlString("transport:\n  network: ucx\n  intra_node: local\n"
                                    "executor.max_in_flight: 8\n").ok());
  EXPECT_EQ(*config.GetString("transport.network"), "ucx");
  EXPECT_EQ(config.SourceOf("transport.network"), "yaml");
  ASSERT_TRUE(config.ApplyEnvironment({"FERRY_TRANSPORT_NETWORK=libfabric", "FERRY_TOKEN=secret",
                                       "FERRY_EXECUTOR_STAGING_BUDGET=256MiB", "PATH=/bin"})
                  .ok());
  EXPECT_EQ(*config.GetString("transport.network"), "libfabric");
  EXPECT_EQ(config.SourceOf("transport.network"), "env");
  EXPECT_EQ(*config.GetString("transport.intra_node"), "local");
  Result<ExecutorOptions> executor = ExecutorOptions::FromConfig(config);
  ASSERT_TRUE(executor.ok()) << executor.status().ToString();
  EXPECT_EQ(executor->max_in_flight, 8);
  EXPECT_EQ(executor->staging_budget, 256 << 20);
}

TEST(ConfigTest, UnknownOptionsAndBadValuesAreErrors) {
  Config config = RuntimeConfig();
  Status unknown = config.LoadYamlString("transport:\n  netwrok: ucx\n");
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("transport.netwrok"), std::string::npos);
  EXPECT_FALSE(config.LoadYamlString("[1, 2").ok());
  ASSERT_TRUE(config.Set("executor.max_in_flight", "many").ok());
  EXPECT_FALSE(config.GetInt("executor.max_in_flight").ok());
  Status bad = ExecutorOptions::FromConfig(config).status();
  EXPECT_NE(bad.message().find("executor.max_in_flight"), std::string::npos) << bad.ToString();
  ASSERT_TRUE(config.Set("executor.max_in_flight", "0").ok());
  bad = ExecutorOptions::FromConfig(config).status();
  EXPECT_NE(bad.message().find("must be at least 1"), std::string::npos) << bad.ToString();
  EXPECT_FALSE(config.GetString("no.such.option").ok());
}

TEST(ConfigTest, ParsesSizesAndDurations) {
  EXPECT_EQ(*ParseBytes("4MiB"), 4 << 20);
  EXPECT_EQ(*ParseBytes("512 KiB"), 512 << 10);
  EXPECT_EQ(*ParseBytes("1GB"), 1000000000);
  EXPECT_EQ(*ParseBytes("77"), 77);
  EXPECT_FALSE(ParseBytes("4 parsecs").ok());
  EXPECT_DOUBLE_EQ(*ParseSeconds("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*ParseSeconds("30s"), 30);
  EXPECT_DOUBLE_EQ(*ParseSeconds("2m"), 120);
  EXPECT_DOUBLE_EQ(*ParseSeconds("1.5"), 1.5);
  EXPECT_FALSE(ParseSeconds("soon").ok());
}

// NaN, infinity and absurd values are refused with the limit named, not read as a number.
TEST(ConfigTest, RefusesNanInfiniteAndAbsurdValues) {
  for (const char* text : {"nan", "nans", "inf", "infs", "-1s", "1e400s", "1e308m"}) {
    EXPECT_FALSE(ParseSeconds(text).ok()) << text;
  }
  Status long_wait = ParseSeconds("3000000s").status();
  EXPECT_NE(long_wait.message().find("kMaxDurationSeconds"), std::string::npos) << long_wait.ToString();
  EXPECT_DOUBLE_EQ(*ParseSeconds("86400s"), 86400);
  Status huge = ParseBytes("99999999999999999999TiB").status();
  EXPECT_NE(huge.message().find("kMaxByteSize"), std::string::npos) << huge.ToString();
  EXPECT_FALSE(ParseBytes("1.2.3KiB").ok());
  Config config = RuntimeConfig();
  ASSERT_TRUE(config.Set("deadline.refit", "nan").ok());
  EXPECT_FALSE(config.GetSeconds("deadline.refit").ok());
  ASSERT_TRUE(config.Set("executor.copy_threads", "100000").ok());
  Status threads = ExecutorOptions::FromConfig(config).status();
  EXPECT_NE(threads.message().find("executor.copy_threads"), std::string::npos) << threads.ToString();
  EXPECT_NE(threads.message().find("at most 256"), std::string::npos) << threads.ToString();
  ASSERT_TRUE(config.Set("executor.copy_threads", "4").ok());
  ASSERT_TRUE(config.Set("executor.staging_budget", "2PiB").ok());
  EXPECT_FALSE(ExecutorOptions::FromConfig(config).ok());
  ASSERT_TRUE(config.Set("executor.staging_budget", "4096TiB").ok());
  Status budget = ExecutorOptions::FromConfig(config).status();
  EXPECT_NE(budget.message().find("kMaxByteSize"), std::string::npos) << budget.ToString();
}

TEST(ConfigTest, TraceDirIsAPathOfBoundedLength) {
  Config config = RuntimeConfig();
  auto options = ExecutorOptions::FromConfig(config);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->trace_dir, "");
  ASSERT_TRUE(config.Set("executor.trace_dir", "/tmp/ferry-trace").ok());
  EXPECT_EQ(ExecutorOptions::FromConfig(config)->trace_dir, "/tmp/ferry-trace");
  ASSERT_TRUE(config.Set("executor.trace_dir", std::string(5000, 'a')).ok());
  Status long_path = ExecutorOptions::FromConfig(config).status();
  EXPECT_NE(long_path.message().find("executor.trace_dir"), std::string::npos) << long_path.ToString();
  EXPECT_NE(long_path.message().find("4096"), std::string::npos) << long_path.ToString();
}

TEST(ConfigTest, DescribeListsEveryOptionWithDefaultEnvAndHelp) {
  Config config(CoreOptions());
  ASSERT_TRUE(config.ApplyEnvironment({"FERRY_DEADLINE_ABORT=1s"}).ok());
  std::string text = config.Describe();
  for (const OptionSpec& option : CoreOptions()) {
    EXPECT_NE(text.find(option.name), std::string::npos) << option.name;
    EXPECT_NE(text.find(option.help), std::string::npos) << option.name;
    EXPECT_NE(text.find(EnvironmentName(option.name)), std::string::npos) << option.name;
  }
  EXPECT_NE(text.find("deadline.abort = 1s   (from env)"), std::string::npos) << text;
}

TEST(ConfigTest, EnvironmentNames) {
  EXPECT_EQ(EnvironmentName("transport.intra_node"), "FERRY_TRANSPORT_INTRA_NODE");
  EXPECT_EQ(EnvironmentName("tcp.address"), "FERRY_TCP_ADDRESS");
}

TEST(ConfigTest, RegistryContributesTransportOptions) {
  TransportRegistry registry;
  ASSERT_TRUE(registry
                  .Register({"fake", "a test transport", {{"fake.speed", "3", "how fast"}},
                             [](const TransportContext&) -> Result<std::unique_ptr<Transport>> {
                               return Unimplemented("fake");
                             }})
                  .ok());
  EXPECT_FALSE(registry.Register({"fake", "again", {}, [](const TransportContext&) -> Result<std::unique_ptr<Transport>> {
                                    return Unimplemented("fake");
                                  }}).ok());
  EXPECT_FALSE(registry.Register({"bad", "", {{"speed", "1", "unprefixed"}}, [](const TransportContext&) -> Result<std::unique_ptr<Transport>> {
                                    return Unimplemented("bad");
                                  }}).ok());
  Config config = RuntimeConfig(registry);
  ASSERT_TRUE(config.ApplyEnvironment({"FERRY_FAKE_SPEED=9"}).ok());
  EXPECT_EQ(*config.GetInt("fake.speed"), 9);
  auto missing = registry.Create("nope", TransportContext{});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("fake"), std::string::npos);
}

}  // namespace
}  // namespace ferry
