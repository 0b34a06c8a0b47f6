// Config: a table of options (name, default, help) and the values in effect. Values come from the
// defaults, then a YAML file, then FERRY_* environment variables (highest priority). Option
// "transport.network" is overridden by FERRY_TRANSPORT_NETWORK: upper-case, '.' becomes '_'.
// Each component owns its part of the table (core/base/option_table.h: the planner's, the
// executor's, the communicator's, each transport's); ferry::DefaultConfig() (core/refit/config.h)
// assembles them, so `ferry config` lists everything that can be set.
//
// Config is a plain value: build it on one thread, then share it read-only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ferry {

struct OptionSpec {
  std::string name;           // "transport.network", "tcp.interface", ...
  std::string default_value;  // text form, parsed by the typed getters
  std::string help;           // one line: what it does and what values it takes
};

// FERRY_TRANSPORT_NETWORK for "transport.network".
std::string EnvironmentName(std::string_view option_name);

// The largest config YAML file LoadYamlFile reads (untrusted input, refused by name beyond it).
inline constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;

class Config {
 public:
  // A config holding `table`'s defaults. Option names must be unique.
  explicit Config(std::vector<OptionSpec> table);

  // Applies "name: value" pairs from a YAML document. Nested maps flatten with dots
  // ({transport: {network: ucx}} sets "transport.network"). Unknown names are errors.
  Status LoadYamlString(std::string_view yaml);
  Status LoadYamlFile(const std::string& path);
  // Applies FERRY_* variables from `environment` ("NAME=value" strings, like environ) that name an
  // option; other FERRY_* variables (FERRY_TOKEN, ...) are not options and are left alone.
  Status ApplyEnvironment(const std::vector<std::string>& environment);
  // Same with the process environment.
  Status ApplyProcessEnvironment();
  // Sets one option; unknown names are errors.
  Status Set(std::string_view name, std::string value);

  Result<std::string> GetString(std::string_view name) const;
  Result<int64_t> GetInt(std::string_view name) const;
  // Byte sizes accept suffixes: "4MiB", "512KiB", "1GiB", "64M", "1000" (bytes).
  Result<int64_t> GetBytes(std::string_view name) const;
  Result<double> GetSeconds(std::string_view name) const;  // "30", "1.5", "500ms", "2s"
  Result<bool> GetBool(std::string_view name) const;       // true/false/1/0/yes/no/on/off

  const std::vector<OptionSpec>& table() const { return table_; }
  // Where the value of `name` came from: "default", "yaml", "env" or "set".
  std::string SourceOf(std::string_view name) const;

  // Human-readable listing of every option: name, env variable, current value, default, help.
  std::string Describe() const;

 private:
  const OptionSpec* Find(std::string_view name) const;

  std::vector<OptionSpec> table_;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> sources_;
};

// Limits on option values: a byte size above kMaxByteSize (1 PiB) or a duration above
// kMaxDurationSeconds (30 days), NaN or infinity is refused with the limit named.
inline constexpr int64_t kMaxByteSize = int64_t{1} << 50;
inline constexpr double kMaxDurationSeconds = 30.0 * 24 * 3600;
Result<int64_t> ParseBytes(std::string_view text);
Result<double> ParseSeconds(std::string_view text);

}  // namespace ferry
