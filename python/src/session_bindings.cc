// ferry._ferry.Session and ferry._ferry.Refit: joining the ranks of a refit (explicitly or from the
// launcher's environment) and running a plan on buffers Python owns.
//
// GIL: Join, Run, Recreate and Finish wait on other processes; they release the GIL, so other
// Python threads run meanwhile. A Refit keeps its Session alive (keep_alive), and a Session must
// not be used from two threads at once (as core/runtime/session.h).
#include <pybind11/stl.h>

#include <cstdio>
#include <fstream>

#include "core/runtime/bootstrap.h"
#include "core/runtime/session.h"
#include "python/src/bindings.h"
#include "python/src/plan_handle.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

// Yama's kernel.yama.ptrace_scope >= 1 (Ubuntu's default is 1): sibling processes may not read
// each other with process_vm_readv unless one names the other with PR_SET_PTRACER.
bool PtraceRestricted() {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  return (in >> scope) && scope >= 1;
}

// Direct reads between ranks of one node read the ordinary memory Python registers through
// process_vm_readv (any geometry, core/runtime/peer_read.h), which needs ptrace access between the
// ranks. Where Yama withholds it, a session for Python turns executor.direct_intra_node off unless
// the caller set it (file, FERRY_* or dict): same-node messages then go through the intra-node
// transport. Elsewhere the option keeps its default (on).
Config SessionConfig(const py::object& source) {
  Config config = ConfigFrom(source);
  const char* option = "executor.direct_intra_node";
  const std::string origin = config.SourceOf(option);
  if ((origin.empty() || origin == "default") && PtraceRestricted()) {
    ThrowIfError(config.Set(option, "false"));
  }
  return config;
}

struct SessionHandle {
  std::unique_ptr<Session> session;
  int64_t gathers = 0;  // AllGather calls so far: every rank makes the same sequence
  int64_t votes = 0;    // AnyRank calls so far, likewise
};

// Every rank passes its bytes; each gets every rank's, in rank order, through the session's store
// (keys python/all_gather/<call>/<rank>). Blocks, GIL released, until all arrived or
// deadline.store passes.
std::vector<py::bytes> AllGather(SessionHandle& handle, const std::string& mine) {
  Session& s = *handle.session;
  const std::string prefix = "python/all_gather/" + std::to_string(handle.gathers++) + "/";
  double seconds = Unwrap(s.config().GetSeconds("deadline.store"));
  std::vector<std::string> values(static_cast<size_t>(s.info().size));
  Status status = Status::Ok();
  {
    py::gil_scoped_release release;
    Deadline deadline = Deadline::AfterSeconds(seconds);
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(mine.data()), mine.size());
    status = s.store().Set(prefix + std::to_string(s.info().rank), bytes, deadline);
    for (size_t r = 0; status.ok() && r < values.size(); ++r) {
      Result<Bytes> got = s.store().Get(prefix + std::to_string(r), deadline);
      if (!got.ok()) {
        status = got.status().WithContext("all_gather: rank " + std::to_string(r));
      } else {
        values[r].assign(got->begin(), got->end());
      }
    }
  }
  ThrowIfError(status);
  return {values.begin(), values.end()};
}

// Whether any rank passed true: each rank adds its vote to one counter and then its arrival to
// another (keys python/any/<call>/votes and .../arrived), waits until every rank arrived and reads
// the votes, which are final by then. Two counters a call whatever the world size, where an
// all_gather stores one key per rank and reads them all on every rank. Blocks, GIL released, until
// all arrived or deadline.store passes.
bool AnyRank(SessionHandle& handle, bool mine) {
  Session& s = *handle.session;
  const std::string prefix = "python/any/" + std::to_string(handle.votes++) + "/";
  double seconds = Unwrap(s.config().GetSeconds("deadline.store"));
  Result<int64_t> votes = int64_t{0};
  {
    py::gil_scoped_release release;
    Deadline deadline = Deadline::AfterSeconds(seconds);
    Store& store = s.store();
    votes = store.Add(prefix + "votes", mine ? 1 : 0, deadline);
    Status status = votes.status();
    if (status.ok()) status = store.Add(prefix + "arrived", 1, deadline).status();
    if (status.ok()) status = store.WaitAtLeast(prefix + "arrived", s.info().size, deadline);
    votes = status.ok() ? store.Add(prefix + "votes", 0, deadline) : Result<int64_t>(status);
  }
  return Unwrap(std::move(votes).WithContext("any_rank")) > 0;
}

// A key of the store's python/kv/ space: named by its caller, at most kMaxKvKey bytes.
constexpr size_t kMaxKvKey = 256;
std::string KvKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKvKey) {
    throw py::value_error("store key of " + std::to_string(key.size()) + " bytes: give 1 to " +
                          std::to_string(kMaxKvKey));
  }
  return "python/kv/" + key;
}

// Sets the store's python/kv/<key> to `value`, replacing what it held. For a value that every
// rank reads only after a vote (any_rank) that follows the write, and that its writer replaces
// only after a later vote, so that one key serves every round rather than one key a round.
void Publish(SessionHandle& handle, const std::string& key, const std::string& value) {
  Session& s = *handle.session;
  const std::string full = KvKey(key);
  double seconds = Unwrap(s.config().GetSeconds("deadline.store"));
  Status status = Status::Ok();
  {
    py::gil_scoped_release release;
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(value.data()), value.size());
    status = s.store().Set(full, bytes, Deadline::AfterSeconds(seconds));
  }
  ThrowIfError(status.WithContext("publish " + key));
}

// The value of python/kv/<key>, waiting until some rank set it or deadline.store passes.
py::bytes Lookup(SessionHandle& handle, const std::string& key) {
  Session& s = *handle.session;
  const std::string full = KvKey(key);
  double seconds = Unwrap(s.config().GetSeconds("deadline.store"));
  Result<Bytes> got = Bytes{};
  {
    py::gil_scoped_release release;
    got = s.store().Get(full, Deadline::AfterSeconds(seconds));
  }
  Bytes value = Unwrap(std::move(got).WithContext("lookup " + key));
  return py::bytes(reinterpret_cast<const char*>(value.data()), value.size());
}

struct RefitHandle {
  std::unique_ptr<Refit> refit;
};

SessionHandle Join(int rank, int world_size, const std::string& store_host, int store_port,
                   const std::string& token, const py::object& config, int local_rank,
                   int local_world_size, std::vector<int> node_of_rank, bool store_external) {
  BootstrapInfo info;
  info.launcher = "explicit";
  info.rank = rank;
  info.size = world_size;
  info.local_rank = local_rank;
  info.local_size = local_world_size;
  info.store_host = store_host;
  info.store_port = store_port;
  info.token = token;
  info.store_external = store_external;
  Config parsed = SessionConfig(config);
  Result<std::unique_ptr<Session>> joined = Status(StatusCode::kInternal, "not joined");
  {
    py::gil_scoped_release release;
    joined = Session::Join(info, std::move(parsed), std::move(node_of_rank));
  }
  return SessionHandle{Unwrap(std::move(joined))};
}

SessionHandle JoinFromEnvironment(const py::object& config) {
  BootstrapInfo info = Unwrap(BootstrapFromProcessEnvironment());
  Config parsed = SessionConfig(config);
  Result<std::unique_ptr<Session>> joined = Status(StatusCode::kInternal, "not joined");
  {
    py::gil_scoped_release release;
    joined = Session::Join(info, std::move(parsed));
  }
  return SessionHandle{Unwrap(std::move(joined))};
}

RefitHandle Bind(SessionHandle& handle, const PlanHandle& plan) {
  return RefitHandle{Unwrap(Refit::Create(*handle.session, plan.plan))};
}

// `device` -1: host memory; otherwise CUDA memory on that device (checked by the facade).
void Register(RefitHandle& handle, const std::string& side, const std::string& name,
              uintptr_t address, int64_t bytes, int device) {
  MemoryDesc memory;
  memory.base = reinterpret_cast<void*>(address);
  memory.bytes = bytes;
  memory.kind = device < 0 ? MemoryKind::kHost : MemoryKind::kCuda;
  memory.device = device < 0 ? -1 : device;
  if (side == "source") {
    ThrowIfError(handle.refit->RegisterSource(name, memory));
  } else if (side == "destination") {
    ThrowIfError(handle.refit->RegisterDestination(name, memory));
  } else {
    throw py::value_error("side must be 'source' or 'destination', not '" + side + "'");
  }
}

// `stream`: the caller's cudaStream_t as an integer, or None to wait for the whole device.
py::dict StatsDict(const RefitStats& s);

py::dict Run(RefitHandle& handle, double timeout_seconds, std::optional<uintptr_t> stream) {
  Result<RefitStats> stats = Status(StatusCode::kInternal, "not run");
  {
    py::gil_scoped_release release;
    if (stream) {
      const Deadline deadline = timeout_seconds > 0 ? Deadline::AfterSeconds(timeout_seconds)
                                                    : handle.refit->DefaultDeadline();
      stats = handle.refit->Run(deadline, reinterpret_cast<void*>(*stream));
    } else {
      stats = timeout_seconds > 0 ? handle.refit->Run(Deadline::AfterSeconds(timeout_seconds))
                                  : handle.refit->Run();
    }
  }
  return StatsDict(Unwrap(std::move(stats)));
}

py::dict RunRest(RefitHandle& handle, double timeout_seconds) {
  Result<RefitStats> stats = Status(StatusCode::kInternal, "not run");
  {
    py::gil_scoped_release release;
    stats = handle.refit->RunRest(timeout_seconds > 0 ? Deadline::AfterSeconds(timeout_seconds)
                                                      : handle.refit->DefaultDeadline());
  }
  return StatsDict(Unwrap(std::move(stats)));
}

py::dict StatsDict(const RefitStats& s) {
  py::dict d;
  d["seconds"] = s.seconds;
  d["bytes_same_rank"] = s.bytes_by_link[0];
  d["bytes_same_node"] = s.bytes_by_link[1];
  d["bytes_network"] = s.bytes_by_link[2];
  d["bytes_delivered"] = s.bytes_delivered;
  d["ops"] = s.executor.ops;
  d["bytes_sent"] = s.executor.bytes_sent;
  d["bytes_received"] = s.executor.bytes_received;
  d["bytes_copied"] = s.executor.bytes_copied;
  d["bytes_read_direct"] = s.executor.bytes_read_direct;
  d["bytes_quantized_direct"] = s.executor.bytes_quantized_direct;
  d["bytes_read_packed"] = s.executor.bytes_read_packed;
  d["gpu_batches"] = s.executor.gpu_batches;
  d["peak_staging_bytes"] = s.executor.peak_staging_bytes;
  d["peer_cuda_mappings"] = s.executor.peer_cuda_mappings;
  py::dict by_transport;  // plan bytes each transport (and "direct_read") delivered to this rank
  for (const auto& [name, traffic] : s.executor.by_transport) by_transport[py::str(name)] = traffic.bytes_received;
  d["bytes_received_by_transport"] = by_transport;
  return d;
}

Status Blocking(const std::function<Status()>& call) {
  py::gil_scoped_release release;
  return call();
}

}  // namespace

void BindSession(py::module_& m) {
  py::class_<SessionHandle>(m, "Session")
      .def_static("join", &Join, py::arg("rank"), py::arg("world_size"), py::arg("store_host"),
                  py::arg("store_port"), py::arg("token"), py::arg("config"),
                  py::arg("local_rank"), py::arg("local_world_size"), py::arg("node_of_rank"),
                  py::arg("store_external"))
      .def_static("from_env", &JoinFromEnvironment, py::arg("config"))
      .def_property_readonly("rank", [](const SessionHandle& h) { return h.session->info().rank; })
      .def_property_readonly("world_size",
                             [](const SessionHandle& h) { return h.session->info().size; })
      .def_property_readonly("local_world_size",
                             [](const SessionHandle& h) { return h.session->info().local_size; })
      .def_property_readonly("launcher",
                             [](const SessionHandle& h) { return h.session->info().launcher; })
      .def("plan",
           [](SessionHandle& h, const LayoutHandle& source, const LayoutHandle& destination,
              const std::string& strategy, const py::object& topology, int gpus_per_node) {
             return MakePlanHandle(source, destination, strategy, topology, gpus_per_node,
                                   h.session->config());
           })
      .def("bind", &Bind, py::keep_alive<0, 1>())
      .def("all_gather", &AllGather)
      .def("any_rank", &AnyRank)
      .def("publish", &Publish)
      .def("lookup", &Lookup)
      .def("recreate",
           [](SessionHandle& h, double timeout_seconds) {
             Session& s = *h.session;
             if (const std::string notice = s.TakeRecoveryNotice(); !notice.empty()) {
               std::fprintf(stderr, "%s\n", notice.c_str());
             }
             ThrowIfError(Blocking([&] {
               return s.communicator().Recreate(Deadline::AfterSeconds(timeout_seconds));
             }));
           })
      .def("finish", [](SessionHandle& h) {
        Session& s = *h.session;
        ThrowIfError(Blocking([&] { return s.Finish(); }));
      });
  py::class_<RefitHandle>(m, "Refit")
      .def("register", &Register, py::arg("side"), py::arg("name"), py::arg("address"),
           py::arg("bytes"), py::arg("device") = -1)
      .def("run", &Run, py::arg("timeout_seconds"), py::arg("stream"))
      .def("run_rest", &RunRest, py::arg("timeout_seconds"))
      .def("complete_tensors", [](const RefitHandle& h) {
        const Layout& destination = h.refit->plan().destination();
        std::vector<std::string> names;
        for (int t : h.refit->CompleteDestinationTensors()) names.push_back(destination.tensors[t].name);
        return names;
      });
}

}  // namespace ferry::python
