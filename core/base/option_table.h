// OptionTable<S>: one component's options as one table — each option's name, default, help and the
// field of the typed struct S that holds its value (UCX's config field tables, in C++). A component
// reads its options once, `S options = table.Read(config)`, and from then on uses typed fields, never
// option names. The defaults are the values of a default-made S, so a struct and its table cannot
// disagree; Specs() gives them to Config (core/base/config.h) for listing and loading.
//
// A table is a plain value: build it once (a function-local static is the usual home) and share it
// read-only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/config.h"
#include "core/base/status.h"

namespace ferry {

// "32MiB", "1GiB", "1000": the form Config::GetBytes reads back.
inline std::string ByteSizeText(int64_t bytes) {
  static const std::pair<int64_t, const char*> kUnits[] = {
      {int64_t{1} << 40, "TiB"}, {int64_t{1} << 30, "GiB"}, {int64_t{1} << 20, "MiB"}, {int64_t{1} << 10, "KiB"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

// "300s", "0.5s": the form Config::GetSeconds reads back.
inline std::string SecondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%gs", seconds);
  return text;
}

template <typename S>
class OptionTable {
 public:
  // A byte size ("4MiB") in [minimum, maximum].
  OptionTable& Bytes(std::string name, int64_t S::*field, std::string help, int64_t minimum = 1,
                     int64_t maximum = kMaxByteSize) {
    return Add(std::move(name), ByteSizeText(S{}.*field), std::move(help),
               [name, field, minimum, maximum](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(int64_t value, config.GetBytes(name));
                 if (value < minimum) return AtLeast(name, value, ByteSizeText(minimum));
                 if (value > maximum) return AtMost(name, value, ByteSizeText(maximum));
                 out.*field = value;
                 return Status::Ok();
               });
  }

  // An integer in [minimum, maximum].
  OptionTable& Int(std::string name, int S::*field, std::string help, int minimum = 0,
                   int maximum = 1 << 20) {
    return Add(std::move(name), std::to_string(S{}.*field), std::move(help),
               [name, field, minimum, maximum](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(int64_t value, config.GetInt(name));
                 if (value < minimum) return AtLeast(name, value, std::to_string(minimum));
                 if (value > maximum) return AtMost(name, value, std::to_string(maximum));
                 out.*field = static_cast<int>(value);
                 return Status::Ok();
               });
  }

  OptionTable& Bool(std::string name, bool S::*field, std::string help) {
    return Add(std::move(name), S{}.*field ? "true" : "false", std::move(help),
               [name, field](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(out.*field, config.GetBool(name));
                 return Status::Ok();
               });
  }

  // A file system path, empty by default; at most 4096 bytes.
  OptionTable& Path(std::string name, std::string S::*field, std::string help) {
    return Add(std::move(name), S{}.*field, std::move(help),
               [name, field](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(std::string value, config.GetString(name));
                 if (value.size() > 4096) {
                   return InvalidArgument("option '" + name + "': a path of " + std::to_string(value.size()) +
                                          " bytes, more than 4096");
                 }
                 out.*field = std::move(value);
                 return Status::Ok();
               });
  }

  // A duration ("30s", "500ms"), stored in seconds; it must be positive (Config::GetSeconds
  // refuses NaN, infinity and more than kMaxDurationSeconds).
  OptionTable& Seconds(std::string name, double S::*field, std::string help) {
    return Add(std::move(name), SecondsText(S{}.*field), std::move(help),
               [name, field](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(double value, config.GetSeconds(name));
                 if (!(value > 0)) return InvalidArgument("option '" + name + "' must be positive");
                 out.*field = value;
                 return Status::Ok();
               });
  }

  // One of a few named values; the help lists them.
  template <typename E>
  OptionTable& Choice(std::string name, E S::*field, std::vector<std::pair<std::string, E>> choices,
                      std::string help) {
    std::string default_text, names;
    for (const auto& [text, value] : choices) {
      if (value == S{}.*field) default_text = text;
      names += (names.empty() ? "" : ", ") + text;
    }
    return Add(std::move(name), default_text, help + " (" + names + ")",
               [name, field, choices, names](const Config& config, S& out) -> Status {
                 FERRY_ASSIGN_OR_RETURN(std::string text, config.GetString(name));
                 for (const auto& [choice, value] : choices) {
                   if (choice == text) {
                     out.*field = value;
                     return Status::Ok();
                   }
                 }
                 return InvalidArgument("option '" + name + "': '" + text + "' is not one of " + names);
               });
  }

  std::vector<OptionSpec> Specs() const {
    std::vector<OptionSpec> specs;
    for (const Field& f : fields_) specs.push_back(f.spec);
    return specs;
  }

  // Every option of the table from `config`, over a default-made S. The first bad value fails,
  // naming the option; `config` must hold every option of the table (Config(table.Specs()) does).
  Result<S> Read(const Config& config) const {
    S out;
    for (const Field& f : fields_) FERRY_RETURN_IF_ERROR(f.read(config, out));
    return out;
  }

 private:
  using Reader = std::function<Status(const Config&, S&)>;
  struct Field {
    OptionSpec spec;
    Reader read;
  };

  OptionTable& Add(std::string name, std::string default_value, std::string help, Reader read) {
    fields_.push_back({OptionSpec{std::move(name), std::move(default_value), std::move(help)}, std::move(read)});
    return *this;
  }

  static Status AtLeast(const std::string& name, int64_t value, const std::string& minimum) {
    return InvalidArgument("option '" + name + "' is " + std::to_string(value) + "; it must be at least " +
                           minimum);
  }

  static Status AtMost(const std::string& name, int64_t value, const std::string& maximum) {
    return InvalidArgument("option '" + name + "' is " + std::to_string(value) + "; it must be at most " +
                           maximum);
  }

  std::vector<Field> fields_;
};

}  // namespace ferry
