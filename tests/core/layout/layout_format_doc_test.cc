// Checks that every example in docs/layout-format.md parses, and that each layout example passes
// ValidateLayout, so the documentation cannot drift from the reader.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/layout/layout_io.h"
#include "core/layout/validate.h"

namespace ferry {
namespace {

// The bodies of the ```yaml and ```json blocks of the document.
std::vector<std::string> CodeBlocks(const std::string& doc) {
  std::vector<std::string> blocks;
  std::istringstream in(doc);
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && (line == "```yaml" || line == "```json")) {
      inside = true;
      block.clear();
    } else if (inside && line == "```") {
      inside = false;
      blocks.push_back(block);
    } else if (inside) {
      block += line + "\n";
    }
  }
  return blocks;
}

TEST(LayoutFormatDocTest, ExamplesParseAndValidate) {
  std::ifstream in("docs/layout-format.md");
  ASSERT_TRUE(in) << "docs/layout-format.md is not in the test's runfiles";
  std::stringstream doc;
  doc << in.rdbuf();
  int layouts = 0, topologies = 0;
  for (const std::string& block : CodeBlocks(doc.str())) {
    if (block.find("ferry-topology") != std::string::npos) {
      auto t = ParseTopologyYaml(block);
      EXPECT_TRUE(t.ok()) << t.status().ToString() << "\n" << block;
      ++topologies;
    } else if (block.find("ferry-layout") != std::string::npos) {
      auto l = ParseLayoutYaml(block);
      ASSERT_TRUE(l.ok()) << l.status().ToString() << "\n" << block;
      Status valid = ValidateLayout(*l);
      EXPECT_TRUE(valid.ok()) << valid.ToString() << "\n" << block;
      ++layouts;
    }
  }
  EXPECT_EQ(layouts, 5);
  EXPECT_EQ(topologies, 2);
}

}  // namespace
}  // namespace ferry
