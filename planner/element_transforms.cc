// Destination tensors stored through an element function: twin buffers before planning, staging
// slots and Convert ops after (planner/element_transforms.h).
#include "planner/element_transforms.h"

#include <algorithm>
#include <string>
#include <utility>

#include "planner/twin_slots.h"

namespace ferry {
namespace {

// A destination tensor's element function (kNone for tensors stored as they are, or through a
// transform ferry has no function for) and the source's dtype of it.
struct TensorFn {
  ElementFn fn = ElementFn::kNone;
  DType from = DType::kBF16;
};

// Per destination tensor, its TensorFn, checked against the source's dtype and the stored dtype.
Result<std::vector<TensorFn>> TensorFunctions(const Layout& source, const Layout& destination) {
  std::vector<TensorFn> fns(destination.tensors.size());
  for (const StoredTransform& x : destination.transforms) {
    const ElementFn fn = ElementFnOfTransform(x.transform);
    if (fn == ElementFn::kNone || x.tensor < 0 || static_cast<size_t>(x.tensor) >= fns.size()) continue;
    const std::string& name = destination.tensors[static_cast<size_t>(x.tensor)].name;
    const int s = source.FindTensor(name);
    const std::string where = "destination tensor '" + name + "' stored as " + x.transform;
    if (s < 0) return InvalidArgument(where + ": the source does not hold '" + name + "'");
    const DType from = source.tensors[static_cast<size_t>(s)].dtype;
    if (!ElementFnApplies(fn, from, x.stored_dtype)) {
      return InvalidArgument(where + " in " + std::string(DTypeName(x.stored_dtype)) + " from the source's " +
                             std::string(DTypeName(from)) +
                             ": ferry applies it from bf16, fp16 or fp32 into fp32");
    }
    fns[static_cast<size_t>(x.tensor)] = {fn, from};
  }
  return fns;
}

// Moves each fragment of a tensor with an element function into a twin of its own (dense, of the
// source's dtype, appended to out.destination's buffers), recording the twins.
void MoveIntoTwins(const Layout& destination, const std::vector<TensorFn>& fns, ElementTransformLayout& out) {
  Layout& l = out.destination;
  FragmentTable moved;
  moved.reserve(destination.fragments.size());
  size_t index = 0;
  for (Fragment f : destination.fragments) {
    const TensorFn& t = fns[static_cast<size_t>(f.tensor)];
    if (t.fn != ElementFn::kNone) {
      const std::vector<int64_t> shape = f.box.Shape();
      TransformTwin twin;
      twin.rank = f.loc.rank;
      twin.to = Region{Space::kDestination, f.loc.buffer, f.loc.byte_offset, DType::kFP32, f.box.ndim, {}, f.loc.strides};
      std::copy(shape.begin(), shape.end(), twin.to.shape.begin());
      twin.dtype = t.from;
      twin.fn = t.fn;
      twin.twin = l.GetOrAddBuffer(f.loc.rank, destination.buffers[static_cast<size_t>(f.loc.buffer)].name +
                                                   " [fragment " + std::to_string(index) + " of '" +
                                                   l.tensors[static_cast<size_t>(f.tensor)].name + "' as " +
                                                   std::string(DTypeName(t.from)) + "]");
      l.buffers.SetBytes(static_cast<size_t>(twin.twin), f.box.Volume() * DTypeSize(t.from));
      out.twins.push_back(twin);
      f.loc.buffer = twin.twin;
      f.loc.byte_offset = 0;
      f.loc.strides = RowMajorStrides(shape);
    }
    moved.push_back(f);
    ++index;
  }
  l.fragments = std::move(moved);
}

}  // namespace

Result<ElementTransformLayout> PrepareElementTransforms(const Layout& source, const Layout& destination) {
  ElementTransformLayout out;
  out.original_buffers = destination.buffers.size();
  if (destination.transforms.empty()) return out;
  FERRY_ASSIGN_OR_RETURN(const std::vector<TensorFn> fns, TensorFunctions(source, destination));
  if (std::all_of(fns.begin(), fns.end(), [](const TensorFn& t) { return t.fn == ElementFn::kNone; })) return out;
  out.destination = destination;
  Layout& l = out.destination;
  std::erase_if(l.transforms, [&](const StoredTransform& x) {
    return x.tensor >= 0 && static_cast<size_t>(x.tensor) < fns.size() &&
           fns[static_cast<size_t>(x.tensor)].fn != ElementFn::kNone;
  });
  for (size_t t = 0; t < fns.size(); ++t) {
    if (fns[t].fn != ElementFn::kNone) l.tensors[t].dtype = fns[t].from;
  }
  MoveIntoTwins(destination, fns, out);
  return out;
}

void FinishElementTransforms(const ElementTransformLayout& prepared, const Layout& destination,
                             TransferPlan& plan) {
  if (prepared.twins.empty()) return;
  const size_t first = prepared.original_buffers;
  std::vector<int> slot_of_twin(prepared.destination.buffers.size() - first, -1);
  for (const TransformTwin& t : prepared.twins) {
    slot_of_twin[static_cast<size_t>(t.twin) - first] = plan.AddSlot(t.rank, t.to.NumElements() * DTypeSize(t.dtype));
  }
  const std::vector<std::vector<int>> users = TwinsToSlots(plan, first, slot_of_twin);
  plan.destination_buffers = destination.buffers;
  for (const TransformTwin& t : prepared.twins) {
    const size_t k = static_cast<size_t>(t.twin) - first;
    Op c;
    c.kind = OpKind::kConvert;
    c.link = LinkClass::kSameRank;
    c.rank = t.rank;
    for (int d : users[k]) c.round = std::max(c.round, plan.ops[static_cast<size_t>(d)].round);
    c.bytes = t.to.NumBytes();
    CopyPair pair;
    pair.from = Region{Space::kStaging, slot_of_twin[k], 0, t.dtype, t.to.ndim, t.to.shape,
                       RowMajorStrides(std::vector<int64_t>(t.to.shape.begin(), t.to.shape.begin() + t.to.ndim))};
    pair.to = t.to;
    pair.fn = t.fn;
    plan.AddOp(c, users[k], {pair});
  }
}

}  // namespace ferry
