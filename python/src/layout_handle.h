// LayoutHandle: how Python holds a core Layout. Shared and immutable once made, so a plan can keep
// the same layout Python still refers to without copying it.
#pragma once

#include <memory>

#include "core/layout/layout.h"

namespace ferry::python {

class LayoutHandle {
 public:
  explicit LayoutHandle(Layout layout)
      : layout_(std::make_shared<const Layout>(std::move(layout))) {}
  const Layout& get() const { return *layout_; }
  const std::shared_ptr<const Layout>& shared() const { return layout_; }

 private:
  std::shared_ptr<const Layout> layout_;
};

}  // namespace ferry::python
