// The Transport interface's default methods, TransportRegistry and small helpers of the interface.
#include "core/runtime/transport.h"

#include "core/runtime/executor_options.h"
#include "core/runtime/runtime_options.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

namespace ferry {

std::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
  }
  return "unknown";
}

TransportRegistry& TransportRegistry::Default() {
  static TransportRegistry* registry = new TransportRegistry();
  return *registry;
}

Status TransportRegistry::Register(TransportRegistration registration) {
  if (registration.name.empty()) return InvalidArgument("transport registration without a name");
  if (!registration.factory) {
    return InvalidArgument("transport '" + registration.name + "' registered without a factory");
  }
  for (const OptionSpec& option : registration.options) {
    if (option.name.rfind(registration.name + ".", 0) != 0) {
      return InvalidArgument("option '" + option.name + "' of transport '" + registration.name +
                             "' must be named '" + registration.name + ".<option>'");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (registrations_.count(registration.name) != 0) {
    return Status(StatusCode::kAlreadyExists,
                  "transport '" + registration.name + "' is already registered");
  }
  std::string name = registration.name;
  registrations_.emplace(std::move(name), std::move(registration));
  return Status::Ok();
}

Result<std::unique_ptr<Transport>> TransportRegistry::Create(std::string_view name,
                                                             const TransportContext& context) const {
  TransportFactory factory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = registrations_.find(name);
    if (it == registrations_.end()) {
      std::string known;
      for (const auto& [n, r] : registrations_) known += (known.empty() ? "" : ", ") + n;
      return NotFound("unknown transport '" + std::string(name) + "' (registered: " +
                      (known.empty() ? std::string("none") : known) + ")");
    }
    factory = it->second.factory;
  }
  auto created = factory(context);
  if (!created.ok()) {
    return created.status().WithContext("creating transport '" + std::string(name) + "' on rank " +
                                        std::to_string(context.rank));
  }
  return created;
}

bool TransportRegistry::Contains(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return registrations_.find(name) != registrations_.end();
}

std::vector<std::string> TransportRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, registration] : registrations_) names.push_back(name);
  return names;
}

std::vector<OptionSpec> TransportRegistry::AllOptions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OptionSpec> options;
  for (const auto& [name, registration] : registrations_) {
    options.insert(options.end(), registration.options.begin(), registration.options.end());
  }
  return options;
}

std::vector<TransportRegistration> TransportRegistry::Registrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TransportRegistration> all;
  for (const auto& [name, registration] : registrations_) all.push_back(registration);
  return all;
}

Config RuntimeConfig(const TransportRegistry& registry) {
  std::vector<OptionSpec> table = CoreOptions();
  std::vector<OptionSpec> executor_options = ExecutorOptions::Table().Specs();
  table.insert(table.end(), executor_options.begin(), executor_options.end());
  std::vector<OptionSpec> transport_options = registry.AllOptions();
  table.insert(table.end(), transport_options.begin(), transport_options.end());
  return Config(std::move(table));
}

TransportRegistrar::TransportRegistrar(TransportRegistration registration) {
  std::string name = registration.name;
  Status status = TransportRegistry::Default().Register(std::move(registration));
  if (!status.ok()) {
    // Static initialisation has no caller to return to; a duplicate name is a build mistake.
    std::fprintf(stderr, "ferry: cannot register transport '%s': %s\n", name.c_str(),
                 status.ToString().c_str());
    std::abort();
  }
}

void AppendBytes(Bytes& out, const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  out.insert(out.end(), bytes, bytes + size);
}

Status CheckConnectablePeer(int peer, int size, bool already_connected) {
  const std::string who = "peer " + std::to_string(peer);
  if (peer < 0 || peer >= size) {
    return InvalidArgument(who + " is outside the communicator of size " + std::to_string(size));
  }
  if (already_connected) return FailedPrecondition(who + " is already connected");
  return Status::Ok();
}

std::string TransportContext::Option(std::string_view name, std::string fallback) const {
  if (config == nullptr) return fallback;
  auto value = config->GetString(name);
  return value.ok() ? *value : fallback;
}

Result<Bytes> Transport::RemoteKey(MemoryHandle) {
  return Unimplemented(std::string(name()) + " is two-sided only: no remote keys");
}

Result<RequestId> Transport::PostPut(int, uint64_t, const LocalBuffer&, const RemoteBuffer&) {
  return Unimplemented(std::string(name()) + " is two-sided only: no put");
}

Result<RequestId> Transport::PostRecvNotify(int, uint64_t) {
  return Unimplemented(std::string(name()) + " is two-sided only: no put notifications");
}

Status Transport::Cancel(RequestId) {
  return Unimplemented(std::string(name()) + " cannot cancel a request");
}

int TakeCompletions(std::deque<Completion>& ready, std::span<Completion> out) {
  size_t n = 0;
  while (n < out.size() && !ready.empty()) {
    out[n++] = std::move(ready.front());
    ready.pop_front();
  }
  return static_cast<int>(n);
}

void IdlePollBackoff(int idle_rounds) {
  if (idle_rounds <= 16) return;
  if (idle_rounds <= 64) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(5, (idle_rounds - 64) / 16);  // 20 us << 5 = 640 us, capped
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(500, 20 << doublings)));
}

}  // namespace ferry
