// Cached preset refit layouts for the planner benchmarks.
#include "tests/planner/refit_layouts_testutil.h"

#include <map>
#include <utility>

#include "tools/models/presets.h"

namespace ferry {

const models::RefitLayouts& CachedRefit(const std::string& model, const std::string& src,
                                        const std::string& dst) {
  static std::map<std::string, models::RefitLayouts> cache;
  const std::string key = model + " " + src + " " + dst;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  models::ModelPreset preset = models::MakePreset(model).value();
  models::RefitLayouts refit =
      models::BuildRefitLayouts(preset, models::ParseFrameworkSpec(src).value(),
                                models::ParseFrameworkSpec(dst).value())
          .value();
  return cache.emplace(key, std::move(refit)).first->second;
}

}  // namespace ferry
