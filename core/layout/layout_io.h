// Layout and Topology files in YAML (JSON is accepted, being YAML). Schema: docs/layout-format.md.
// Loading validates structure (types, required keys) but not semantics; call ValidateLayout.
#pragma once

#include <string>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"

namespace ferry {

Result<Layout> ParseLayoutYaml(const std::string& text);
std::string LayoutToYaml(const Layout& layout);
Result<Layout> LoadLayoutFile(const std::string& path);
Status SaveLayoutFile(const Layout& layout, const std::string& path);

Result<Topology> ParseTopologyYaml(const std::string& text);
std::string TopologyToYaml(const Topology& topology);
Result<Topology> LoadTopologyFile(const std::string& path);
Status SaveTopologyFile(const Topology& topology, const std::string& path);

}  // namespace ferry
