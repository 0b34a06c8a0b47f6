// Config: YAML/env loading, typed getters and the `ferry config` listing.
#include "core/base/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>
#include <unistd.h>

#include "core/base/file_io.h"
#include "core/base/strings.h"

extern char** environ;

namespace ferry {

std::string EnvironmentName(std::string_view option_name) {
  std::string env = "FERRY_";
  for (char c : option_name) {
    env += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return env;
}

Config::Config(std::vector<OptionSpec> table) : table_(std::move(table)) {
  for (const OptionSpec& option : table_) {
    values_[option.name] = option.default_value;
    sources_[option.name] = "default";
  }
}

const OptionSpec* Config::Find(std::string_view name) const {
  for (const OptionSpec& option : table_) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

Status Config::Set(std::string_view name, std::string value) {
  if (Find(name) == nullptr) {
    return InvalidArgument("unknown option '" + std::string(name) +
                           "' (run `ferry config` for the list)");
  }
  values_[std::string(name)] = std::move(value);
  sources_[std::string(name)] = "set";
  return Status::Ok();
}

namespace {

Status Flatten(const YAML::Node& node, const std::string& prefix,
               std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      std::string key = entry.first.as<std::string>();
      FERRY_RETURN_IF_ERROR(Flatten(entry.second, prefix.empty() ? key : prefix + "." + key, out));
    }
    return Status::Ok();
  }
  if (node.IsScalar()) {
    out.emplace_back(prefix, node.Scalar());
    return Status::Ok();
  }
  if (node.IsNull()) return Status::Ok();
  return InvalidArgument("option '" + prefix + "' must be a scalar, not a list");
}

}  // namespace

Status Config::LoadYamlString(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("config YAML: ") + e.what());
  }
  if (root.IsNull()) return Status::Ok();
  if (!root.IsMap()) return InvalidArgument("config YAML must be a map of options");
  std::vector<std::pair<std::string, std::string>> pairs;
  try {
    FERRY_RETURN_IF_ERROR(Flatten(root, "", pairs));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("config YAML: ") + e.what());
  }
  for (auto& [name, value] : pairs) {
    FERRY_RETURN_IF_ERROR(Set(name, value).WithContext("config YAML"));
    sources_[name] = "yaml";
  }
  return Status::Ok();
}

Status Config::LoadYamlFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(const std::string text,
                         ReadFileAtMost(path, kMaxConfigFileBytes, "config file", "kMaxConfigFileBytes"));
  return LoadYamlString(text).WithContext(path);
}

Status Config::ApplyEnvironment(const std::vector<std::string>& environment) {
  for (const std::string& entry : environment) {
    if (!StartsWith(entry, "FERRY_")) continue;
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string variable = entry.substr(0, eq);
    for (const OptionSpec& option : table_) {
      if (EnvironmentName(option.name) == variable) {
        values_[option.name] = entry.substr(eq + 1);
        sources_[option.name] = "env";
      }
    }
  }
  return Status::Ok();
}

Status Config::ApplyProcessEnvironment() {
  std::vector<std::string> environment;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) environment.emplace_back(*e);
  return ApplyEnvironment(environment);
}

Result<std::string> Config::GetString(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return NotFound("unknown option '" + std::string(name) + "'");
  return it->second;
}

Result<int64_t> Config::GetInt(std::string_view name) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, GetString(name));
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') {
    return InvalidArgument("option '" + std::string(name) + "': '" + text + "' is not an integer");
  }
  return static_cast<int64_t>(value);
}

Result<int64_t> Config::GetBytes(std::string_view name) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, GetString(name));
  return ParseBytes(text).WithContext("option '" + std::string(name) + "'");
}

Result<double> Config::GetSeconds(std::string_view name) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, GetString(name));
  return ParseSeconds(text).WithContext("option '" + std::string(name) + "'");
}

Result<bool> Config::GetBool(std::string_view name) const {
  FERRY_ASSIGN_OR_RETURN(std::string text, GetString(name));
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
  return InvalidArgument("option '" + std::string(name) + "': '" + text + "' is not a boolean");
}

std::string Config::SourceOf(std::string_view name) const {
  auto it = sources_.find(name);
  return it == sources_.end() ? "" : it->second;
}

std::string Config::Describe() const {
  std::ostringstream out;
  for (const OptionSpec& option : table_) {
    std::string value = values_.at(option.name);
    out << option.name << " = " << value;
    if (sources_.at(option.name) != "default") out << "   (from " << sources_.at(option.name) << ")";
    out << "\n    default: " << option.default_value << "   env: " << EnvironmentName(option.name)
        << "\n    " << option.help << "\n";
  }
  return out.str();
}

Result<int64_t> ParseBytes(std::string_view text_view) {
  std::string text = Trim(text_view);
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) ||
                                  text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return InvalidArgument("'" + text + "' is not a byte size");
  double number = std::strtod(text.substr(0, digits).c_str(), nullptr);
  std::string suffix = Trim(text.substr(digits));
  double scale = 0;
  static const std::pair<const char*, double> kSuffixes[] = {
      {"", 1},         {"B", 1},          {"K", 1024},       {"KB", 1e3},     {"KiB", 1024},
      {"M", 1 << 20},  {"MB", 1e6},       {"MiB", 1 << 20},  {"G", 1 << 30},  {"GB", 1e9},
      {"GiB", 1 << 30}, {"T", 1099511627776.0}, {"TB", 1e12}, {"TiB", 1099511627776.0}};
  for (const auto& [name, factor] : kSuffixes) {
    if (suffix == name) scale = factor;
  }
  if (scale == 0) return InvalidArgument("'" + text + "': unknown byte suffix '" + suffix + "'");
  if (std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(digits), '.') > 1) {
    return InvalidArgument("'" + text + "' is not a byte size");
  }
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || bytes > static_cast<double>(kMaxByteSize)) {
    return InvalidArgument("'" + text + "' is over the limit of " + std::to_string(kMaxByteSize) +
                           " bytes (kMaxByteSize)");
  }
  return static_cast<int64_t>(bytes);
}

Result<double> ParseSeconds(std::string_view text_view) {
  std::string text = Trim(text_view);
  double scale = 1;
  std::string number = text;
  if (text.size() > 2 && text.substr(text.size() - 2) == "ms") {
    scale = 1e-3;
    number = text.substr(0, text.size() - 2);
  } else if (text.size() > 1 && text.back() == 's') {
    number = text.substr(0, text.size() - 1);
  } else if (text.size() > 1 && text.back() == 'm') {
    scale = 60;
    number = text.substr(0, text.size() - 1);
  }
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !(value >= 0) || !std::isfinite(value)) {
    return InvalidArgument("'" + text + "' is not a duration (e.g. 30s, 500ms, 2m)");
  }
  if (value * scale > kMaxDurationSeconds) {
    return InvalidArgument("'" + text + "' is over the limit of " +
                           std::to_string(static_cast<int64_t>(kMaxDurationSeconds)) +
                           " seconds (kMaxDurationSeconds: 30 days)");
  }
  return value * scale;
}

}  // namespace ferry
