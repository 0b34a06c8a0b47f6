// ferry._ferry.plan and ferry._ferry.Plan: offline planning through RefitPlan (no session), the
// statistics `ferry plan` prints, and JSON/DOT export.
#include <pybind11/stl.h>

#include <algorithm>

#include "core/layout/layout_io.h"
#include "core/plan/export.h"
#include "core/plan/validate.h"
#include "python/src/bindings.h"
#include "python/src/plan_handle.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

int RanksUsed(const Layout& a, const Layout& b) {
  int highest = -1;
  for (const Layout* layout : {&a, &b}) {
    std::vector<int> ranks = layout->Ranks();
    if (!ranks.empty()) highest = std::max(highest, ranks.back());
  }
  return highest + 1;
}

py::dict LinkBytes(const std::array<int64_t, 3>& bytes) {
  py::dict d;
  d["same_rank"] = bytes[0];
  d["same_node"] = bytes[1];
  d["network"] = bytes[2];
  return d;
}

py::dict StatsDict(const RefitPlan& refit_plan) {
  PlanStats s = refit_plan.Stats();
  const PlanPhaseSeconds& p = refit_plan.planned().phases;
  py::dict d;
  d["strategy"] = std::string(StrategyName(refit_plan.strategy()));
  d["ranks"] = refit_plan.plan().num_ranks;
  d["copy_pairs"] = static_cast<int64_t>(refit_plan.plan().copies.size());
  d["ops"] = s.ops;
  d["messages"] = s.messages;
  d["network_messages"] = s.network_messages;
  d["bytes_by_link"] = LinkBytes(s.bytes_by_link);
  d["pack_bytes"] = s.pack_bytes;
  d["unpack_bytes"] = s.unpack_bytes;
  d["staging_bytes"] = s.staging_bytes;
  d["max_rank_ingress"] = s.max_rank_ingress;
  d["max_rank_egress"] = s.max_rank_egress;
  d["max_node_ingress"] = s.max_node_ingress;
  d["max_node_egress"] = s.max_node_egress;
  d["longest_message_chain"] = s.longest_message_chain;
  d["lower_bound_seconds"] = s.lower_bound.seconds;
  d["predicted_seconds"] = s.predicted_seconds;
  d["planning_seconds"] = refit_plan.planning_seconds();
  d["stacks"] = refit_plan.planned().stacks;
  py::dict phases;
  phases["fold"] = p.fold;
  phases["intersect"] = p.intersect;
  phases["route"] = p.route;
  phases["select"] = p.select;
  phases["order"] = p.order;
  phases["emit"] = p.emit;
  d["phase_seconds"] = phases;
  return d;
}

}  // namespace

PlanHandle MakePlanHandle(const LayoutHandle& source, const LayoutHandle& destination,
                          const std::string& strategy, const py::object& topology,
                          int gpus_per_node, const Config& config) {
  Strategy parsed = Unwrap(ParseStrategy(strategy));
  Topology topo;
  if (topology.is_none()) {
    if (gpus_per_node < 1) throw py::value_error("gpus_per_node must be at least 1");
    topo = Topology::Uniform(RanksUsed(source.get(), destination.get()), gpus_per_node);
  } else {
    topo = Unwrap(LoadTopologyFile(py::str(topology).cast<std::string>()));
  }
  Result<std::shared_ptr<const RefitPlan>> made = Status(StatusCode::kInternal, "not planned");
  {
    py::gil_scoped_release release;  // planning reads only the layouts, never a Python object
    made = RefitPlan::Make(source.shared(), destination.shared(), std::move(topo), parsed, config);
  }
  return PlanHandle{Unwrap(std::move(made))};
}

void BindPlan(py::module_& m) {
  py::class_<PlanHandle>(m, "Plan")
      .def("stats", [](const PlanHandle& h) { return StatsDict(*h.plan); })
      .def("to_json",
           [](const PlanHandle& h, int indent) {
             return PlanToJson(h.plan->plan(), indent, &h.plan->source(), &h.plan->destination());
           },
           py::arg("indent"))
      .def("save_json",
           [](const PlanHandle& h, const std::string& path, int indent) {
             ThrowIfError(WritePlanJsonFile(path, h.plan->plan(), indent, &h.plan->source(),
                                            &h.plan->destination()));
           },
           py::arg("path"), py::arg("indent"))
      .def("to_dot", [](const PlanHandle& h) { return PlanToDot(h.plan->plan()); })
      .def("validate", [](const PlanHandle& h) {
        ThrowIfError(ValidatePlan(h.plan->plan(), h.plan->source(), h.plan->destination()));
      });
  m.def(
      "plan",
      [](const LayoutHandle& source, const LayoutHandle& destination, const std::string& strategy,
         const py::object& topology, int gpus_per_node, const py::object& config) {
        return MakePlanHandle(source, destination, strategy, topology, gpus_per_node,
                              ConfigFrom(config));
      },
      py::arg("source"), py::arg("destination"), py::arg("strategy"), py::arg("topology"),
      py::arg("gpus_per_node"), py::arg("config"));
}

}  // namespace ferry::python
