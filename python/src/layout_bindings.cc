// ferry._ferry.Layout: a shared, read-only-once-built core Layout with the ways to make one
// (presets, files, shard lists, device meshes) and to read it back (tensors, buffers, fragments).
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/base/checked_math.h"
#include "core/base/element_fn.h"
#include "core/base/fp8_scale_format.h"
#include "core/layout/builders.h"
#include "core/layout/layout_io.h"
#include "core/layout/validate.h"
#include "python/src/bindings.h"
#include "python/src/layout_handle.h"
#include "tools/models/fp8_block_weights.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/hf_config.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

// (name, global shape, dtype, lo, hi, rank, buffer, transform: "" or an element function name)
using ShardTuple = std::tuple<std::string, std::vector<int64_t>, std::string, std::vector<int64_t>,
                              std::vector<int64_t>, int, std::string, std::string>;
// (rank, buffer, scales, matrices, rows, cols, scale format): a block-scaled fp8 buffer
using BlockScaledTuple =
    std::tuple<int, std::string, std::string, int64_t, int64_t, int64_t, std::string>;
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

// A shard's `transform`: "" (its elements), an element function's name ("neg_exp": vLLM's Mamba
// A = -exp(A_log) in fp32, core/base/element_fn.h), or "fp8_block" (e4m3 values of a
// block-scaled buffer, which the planner quantizes: core/layout/layout.h BlockScaledBuffer).
struct ShardStorage {
  ElementFn fn = ElementFn::kNone;
  bool fp8_block = false;
  bool operator==(const ShardStorage&) const = default;
  std::string Name() const { return fp8_block ? "fp8_block" : std::string(ElementFnName(fn)); }
};

ShardStorage ParseStorage(const std::string& name, const std::string& transform) {
  if (transform.empty()) return {};
  if (transform == ElementFnName(ElementFn::kNegExp)) return {ElementFn::kNegExp, false};
  if (transform == "fp8_block") return {ElementFn::kNone, true};
  throw py::value_error("shard of " + name + ": unknown transform '" + transform +
                        "' (none, neg_exp or fp8_block)");
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

// The tensor a shard names, as its layout holds it: an fp8_block shard's tensor is e4m3 (its
// `dtype` is the sender's, which the planner reads from the source layout).
TensorSpec StoredSpec(const std::string& name, const std::vector<int64_t>& shape,
                      const std::string& dtype, const ShardStorage& storage) {
  TensorSpec spec = Spec(name, shape, dtype);
  if (storage.fp8_block) spec.dtype = DType::kFP8E4M3;
  return spec;
}

// The buffers (rank, name) that shards lie in, by whether their shards are fp8_block ones.
struct BufferKinds {
  std::set<std::pair<int, std::string>> fp8, other;
};

// Adds the shards' tensors and fragments.
BufferKinds AddShards(Layout& layout, const std::vector<ShardTuple>& shards) {
  std::unordered_map<int, ShardStorage> stored_as;  // tensor -> its shards' storage
  BufferKinds kinds;
  for (const auto& [name, shape, dtype, lo, hi, rank, buffer, transform] : shards) {
    const ShardStorage storage = ParseStorage(name, transform);
    int tensor = Unwrap(
        layout.AddTensor(StoredSpec(name, shape, dtype, storage)).WithContext("tensor " + name));
    Box box = Unwrap(Box::Make(lo, hi).WithContext("box of " + name));
    auto [it, first] = stored_as.emplace(tensor, storage);
    if (!(it->second == storage)) {
      throw py::value_error("tensor " + name + ": its shards disagree on its transform ('" +
                            it->second.Name() + "' and '" + storage.Name() + "')");
    }
    if (first && storage.fn != ElementFn::kNone) {  // its fragments count offsets in fp32
      layout.transforms.push_back({tensor, std::string(ElementFnTransform(storage.fn)),
                                   DType::kFP32});
    }
    if (first && storage.fp8_block) {
      layout.transforms.push_back({tensor, models::kFp8BlockTransform, DType::kFP8E4M3});
    }
    const std::string& where = buffer.empty() ? name : buffer;
    (storage.fp8_block ? kinds.fp8 : kinds.other).insert({rank, where});
    AppendShard(layout, tensor, box, rank, where, storage.fn);
  }
  return kinds;
}

// Lists each block-scaled buffer with its scales buffer (created at its size); every buffer of
// fp8_block shards must be listed, and hold nothing else.
void AddBlockScaled(Layout& layout, const std::vector<BlockScaledTuple>& block_scaled,
                    BufferKinds kinds) {
  for (const auto& [rank, buffer, scales, matrices, rows, cols, format] : block_scaled) {
    const std::string what = "block-scaled buffer '" + buffer + "' on rank " + std::to_string(rank);
    const std::optional<Fp8ScaleFormat> fmt = ParseFp8ScaleFormat(format);
    if (!fmt) {
      throw py::value_error(what + ": scale_fmt '" + format + "' is not " +
                            std::string(kFp8ScaleFormatNames));
    }
    if (kinds.fp8.erase({rank, buffer}) == 0) {
      throw py::value_error(what + ": no shard with transform 'fp8_block' lies in it, or it is "
                            "listed twice");
    }
    if (kinds.other.count({rank, buffer}) > 0) {
      throw py::value_error(what + ": it also holds shards without transform 'fp8_block'");
    }
    if (layout.FindBuffer(rank, scales) >= 0) {
      throw py::value_error(what + ": its scales buffer '" + scales + "' holds shards or the "
                            "scales of another buffer");
    }
    if (matrices < 1 || rows < 1 || cols < 1) {
      throw py::value_error(what + ": matrices, rows and cols must be at least 1");
    }
    // First the values' size (which bounds rows and cols), then the scales' from it.
    const int values = layout.FindBuffer(rank, buffer);
    const int64_t bytes = layout.buffers[static_cast<size_t>(values)].bytes;
    if (SatMul(SatMul(matrices, rows), cols) != bytes) {
      throw py::value_error(what + ": " + std::to_string(matrices) + " x [" +
                            std::to_string(rows) + ", " + std::to_string(cols) +
                            "] fp8 matrices do not match its shards' " + std::to_string(bytes) +
                            " bytes");
    }
    const int s = layout.GetOrAddBuffer(rank, scales);
    layout.buffers.SetBytes(static_cast<size_t>(s),
                            SatMul(matrices, Fp8ScaleMatrixBytes(*fmt, rows, cols)));
    layout.block_scaled.push_back({values, s, matrices, rows, cols, *fmt});
  }
  if (!kinds.fp8.empty()) {
    const auto& [rank, buffer] = *kinds.fp8.begin();
    throw py::value_error("buffer '" + buffer + "' on rank " + std::to_string(rank) +
                          " holds fp8_block shards but no block_scaled entry names it");
  }
}

LayoutHandle FromShards(const std::vector<ShardTuple>& shards,
                        const std::vector<BlockScaledTuple>& block_scaled) {
  Layout layout;
  AddBlockScaled(layout, block_scaled, AddShards(layout, shards));
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

// (rank, buffer, scales, matrices, rows, cols, scale format) of each block-scaled buffer.
py::list BlockScaled(const LayoutHandle& handle) {
  py::list out;
  const Layout& layout = handle.get();
  for (const BlockScaledBuffer& b : layout.block_scaled) {
    const BufferSpec& values = layout.buffers[static_cast<size_t>(b.buffer)];
    out.append(py::make_tuple(values.rank, values.name,
                              layout.buffers[static_cast<size_t>(b.scales)].name, b.matrices,
                              b.rows, b.cols, std::string(Fp8ScaleFormatName(b.scale_fmt))));
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
      .def_static("from_shards", &FromShards, py::arg("shards"),
                  py::arg("block_scaled") = std::vector<BlockScaledTuple>{})
      .def_static("from_meshes", &FromMeshes)
      .def("save", [](const LayoutHandle& h, const std::string& path) {
        ThrowIfError(SaveLayoutFile(h.get(), path));
      })
      .def("to_yaml", [](const LayoutHandle& h) { return LayoutToYaml(h.get()); })
      .def("validate", [](const LayoutHandle& h) { ThrowIfError(ValidateLayout(h.get())); })
      .def("ranks", [](const LayoutHandle& h) { return h.get().Ranks(); })
      .def("tensors", &Tensors)
      .def("transforms", &Transforms)
      .def("block_scaled", &BlockScaled)
      .def("buffers", &Buffers)
      .def("fragments", &Fragments, py::arg("rank") = -1);
}

}  // namespace ferry::python
