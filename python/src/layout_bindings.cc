// ferry._ferry.Layout: a shared, read-only-once-built core Layout with the ways to make one
// (presets, files, shard lists, device meshes) and to read it back (tensors, buffers, fragments).
#include <pybind11/stl.h>

#include <memory>
#include <tuple>
#include <unordered_map>

#include "core/base/checked_math.h"
#include "core/base/element_fn.h"
#include "core/layout/builders.h"
#include "core/layout/layout_io.h"
#include "core/layout/validate.h"
#include "python/src/bindings.h"
#include "python/src/layout_handle.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/hf_config.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

// (name, global shape, dtype, lo, hi, rank, buffer, transform: "" or an element function name)
using ShardTuple = std::tuple<std::string, std::vector<int64_t>, std::string, std::vector<int64_t>,
                              std::vector<int64_t>, int, std::string, std::string>;
// (name, global shape, dtype, mesh shape, mesh ranks, placements [(kind, dim)], buffer)
using MeshTuple =
    std::tuple<std::string, std::vector<int64_t>, std::string, std::vector<int64_t>,
               std::vector<int>, std::vector<std::pair<std::string, int>>, std::string>;

TensorSpec Spec(const std::string& name, const std::vector<int64_t>& shape,
                const std::string& dtype) {
  return TensorSpec{name, shape, Unwrap(ParseDType(dtype))};
}

LayoutHandle Preset(const std::string& model, const std::string& framework,
                    const std::string& scale, int first_rank) {
  double factor = scale.empty() ? 1.0 : Unwrap(models::ParseScale(scale));
  models::ModelPreset preset = Unwrap(models::MakeModel(model, factor));
  models::FrameworkSpec spec = Unwrap(models::ParseFrameworkSpec(framework));
  return LayoutHandle(Unwrap(models::BuildFrameworkLayout(preset, spec, first_rank)));
}

// The element function a shard's `transform` names ("" none; "neg_exp": vLLM's Mamba A =
// -exp(A_log) in fp32, core/base/element_fn.h).
ElementFn ShardTransform(const std::string& name, const std::string& transform) {
  if (transform.empty()) return ElementFn::kNone;
  if (transform == ElementFnName(ElementFn::kNegExp)) return ElementFn::kNegExp;
  throw py::value_error("shard of " + name + ": unknown transform '" + transform +
                        "' (none, or neg_exp)");
}

// `box` of `tensor` at the end of its buffer, contiguous row-major in the dtype it is stored in.
void AppendShard(Layout& layout, int tensor, const Box& box, int rank, const std::string& buffer,
                 ElementFn fn) {
  if (fn == ElementFn::kNone) {
    layout.AppendFragment(tensor, box, rank, buffer);
    return;
  }
  const int b = layout.GetOrAddBuffer(rank, buffer);
  const int f = layout.PlaceFragment(tensor, box, rank, buffer, layout.buffers[b].bytes,
                                     RowMajorStrides(box.Shape()));
  auto [offset, length] = layout.FragmentSpan(layout.fragments[f], DType::kFP32);
  layout.buffers.GrowBytes(static_cast<size_t>(b), SatAdd(offset, length));
}

LayoutHandle FromShards(const std::vector<ShardTuple>& shards) {
  Layout layout;
  std::unordered_map<int, ElementFn> stored_as;  // tensor -> its shards' transform
  for (const auto& [name, shape, dtype, lo, hi, rank, buffer, transform] : shards) {
    int tensor = Unwrap(layout.AddTensor(Spec(name, shape, dtype)).WithContext("tensor " + name));
    Box box = Unwrap(Box::Make(lo, hi).WithContext("box of " + name));
    const ElementFn fn = ShardTransform(name, transform);
    auto [it, first] = stored_as.emplace(tensor, fn);
    if (it->second != fn) {
      throw py::value_error("tensor " + name + ": its shards disagree on its transform ('" +
                            std::string(ElementFnName(it->second)) + "' and '" +
                            std::string(ElementFnName(fn)) + "')");
    }
    if (first && fn != ElementFn::kNone) {  // its fragments count offsets in fp32 elements
      layout.transforms.push_back({tensor, std::string(ElementFnTransform(fn)), DType::kFP32});
    }
    AppendShard(layout, tensor, box, rank, buffer.empty() ? name : buffer, fn);
  }
  ValidateOptions options;
  options.require_full_coverage = false;
  ThrowIfError(ValidateLayout(layout, options));
  return LayoutHandle(std::move(layout));
}

Placement PlacementOf(const std::pair<std::string, int>& placement) {
  if (placement.first == "shard") return Shard(placement.second);
  if (placement.first == "replicate") return Replicate();
  throw py::value_error("placement must be ('shard', dim) or ('replicate', 0), not '" +
                        placement.first + "'");
}

LayoutHandle FromMeshes(const std::vector<MeshTuple>& tensors) {
  Layout layout;
  for (const auto& [name, shape, dtype, mesh_shape, mesh_ranks, placements, buffer] : tensors) {
    std::vector<Placement> converted;
    for (const auto& p : placements) converted.push_back(PlacementOf(p));
    DeviceMesh mesh = DeviceMesh::Make(mesh_shape, mesh_ranks);
    ThrowIfError(AddMeshSharded(layout, Spec(name, shape, dtype), mesh, converted, buffer)
                     .WithContext("tensor " + name));
  }
  return LayoutHandle(std::move(layout));
}

py::list Fragments(const LayoutHandle& handle, int rank) {
  const Layout& layout = handle.get();
  py::list out;
  for (const Fragment& f : layout.fragments) {
    if (rank >= 0 && f.loc.rank != rank) continue;
    std::vector<int64_t> lo(f.box.lo.begin(), f.box.lo.begin() + f.box.ndim);
    std::vector<int64_t> hi(f.box.hi.begin(), f.box.hi.begin() + f.box.ndim);
    std::vector<int64_t> strides(f.loc.strides.begin(), f.loc.strides.begin() + f.box.ndim);
    py::dict d;
    d["tensor"] = layout.tensors[f.tensor].name;
    d["lo"] = lo;
    d["hi"] = hi;
    d["rank"] = f.loc.rank;
    d["buffer"] = layout.buffers[f.loc.buffer].name;
    d["byte_offset"] = f.loc.byte_offset;
    d["strides"] = strides;
    out.append(d);
  }
  return out;
}

py::list Tensors(const LayoutHandle& handle) {
  py::list out;
  for (const TensorSpec& t : handle.get().tensors) {
    out.append(py::make_tuple(t.name, t.shape, std::string(DTypeName(t.dtype))));
  }
  return out;
}

// (tensor name, what is stored, stored dtype) of each tensor the layout keeps transformed.
py::list Transforms(const LayoutHandle& handle) {
  py::list out;
  const Layout& layout = handle.get();
  for (const StoredTransform& t : layout.transforms) {
    out.append(py::make_tuple(layout.tensors[t.tensor].name, t.transform,
                              std::string(DTypeName(t.stored_dtype))));
  }
  return out;
}

py::list Buffers(const LayoutHandle& handle) {
  py::list out;
  const BufferList& buffers = handle.get().buffers;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferSpec& b = buffers[i];
    out.append(py::make_tuple(b.rank, b.name, b.bytes));
  }
  return out;
}

}  // namespace

void BindLayout(py::module_& m) {
  py::class_<LayoutHandle>(m, "Layout")
      .def_static("preset", &Preset, py::arg("model"), py::arg("framework"), py::arg("scale"),
                  py::arg("first_rank"))
      .def_static("load", [](const std::string& path) {
        return LayoutHandle(Unwrap(LoadLayoutFile(path)));
      })
      .def_static("from_yaml", [](const std::string& text) {
        return LayoutHandle(Unwrap(ParseLayoutYaml(text)));
      })
      .def_static("from_shards", &FromShards)
      .def_static("from_meshes", &FromMeshes)
      .def("save", [](const LayoutHandle& h, const std::string& path) {
        ThrowIfError(SaveLayoutFile(h.get(), path));
      })
      .def("to_yaml", [](const LayoutHandle& h) { return LayoutToYaml(h.get()); })
      .def("validate", [](const LayoutHandle& h) { ThrowIfError(ValidateLayout(h.get())); })
      .def("ranks", [](const LayoutHandle& h) { return h.get().Ranks(); })
      .def("tensors", &Tensors)
      .def("transforms", &Transforms)
      .def("buffers", &Buffers)
      .def("fragments", &Fragments, py::arg("rank") = -1);
}

}  // namespace ferry::python
