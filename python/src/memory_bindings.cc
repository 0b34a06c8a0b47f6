// ferry._ferry's view of memory that Python hands over by address: a DLPack capsule read in place
// (its data pointer, shape, strides, dtype and device; the capsule is not consumed, so its owner
// keeps the memory alive until the capsule is dropped), and the CUDA device that holds a pointer
// (for __cuda_array_interface__ objects, which do not say).
//
// The DLPack structures mirror the legacy DLManagedTensor of dmlc/dlpack's
// include/dlpack/dlpack.h (the "dltensor" capsule a producer's __dlpack__() returns when the
// consumer asks for no version): DLTensor {data, device {type, id}, ndim, dtype {code, bits,
// lanes}, shape, strides (elements; NULL = C-contiguous), byte_offset}, followed by manager_ctx
// and deleter. Everything read from the capsule is checked before use.
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/refit/memory_check.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

struct DlDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DlDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DlManagedTensor {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManagedTensor*);
};

constexpr int32_t kMaxDims = 64;  // no array library makes more; a larger count is corrupt

// The bytes a C-contiguous tensor of `shape` occupies, or an error for a negative or overflowing
// extent.
int64_t ContiguousBytes(const std::vector<int64_t>& shape, int64_t item_bytes) {
  int64_t bytes = item_bytes;
  for (int64_t extent : shape) {
    if (extent < 0) throw py::value_error("DLPack tensor: negative extent " + std::to_string(extent));
    if (extent != 0 && bytes > INT64_MAX / extent) throw py::value_error("DLPack tensor: size overflows");
    bytes *= extent;
  }
  return bytes;
}

// The tensor a "dltensor" capsule describes, as a dict: address (data + byte_offset), nbytes,
// shape, strides (None when C-contiguous by omission), code, bits, device_type, device_id.
py::dict DlpackTensor(const py::capsule& capsule) {
  if (std::string(capsule.name() ? capsule.name() : "") != "dltensor") {
    throw py::value_error("expected an unused DLPack capsule named 'dltensor', got '" +
                          std::string(capsule.name() ? capsule.name() : "") + "'");
  }
  const auto* managed = capsule.get_pointer<DlManagedTensor>();
  if (managed == nullptr) throw py::value_error("DLPack capsule holds no tensor");
  const DlTensor& t = managed->dl_tensor;
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    throw py::value_error("DLPack tensor: " + std::to_string(t.ndim) + " dimensions");
  }
  if (t.dtype.lanes != 1 || t.dtype.bits == 0 || t.dtype.bits % 8 != 0) {
    throw py::value_error("DLPack tensor: elements of " + std::to_string(t.dtype.bits) + " bits x " +
                          std::to_string(t.dtype.lanes) + " lanes; ferry moves whole-byte scalars");
  }
  if (t.ndim > 0 && t.shape == nullptr) throw py::value_error("DLPack tensor: no shape");
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  py::dict d;
  d["nbytes"] = ContiguousBytes(shape, t.dtype.bits / 8);
  d["address"] = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  d["shape"] = shape;
  d["strides"] = t.strides == nullptr ? py::object(py::none())
                                      : py::cast(std::vector<int64_t>(t.strides, t.strides + t.ndim));
  d["code"] = static_cast<int>(t.dtype.code);
  d["bits"] = static_cast<int>(t.dtype.bits);
  d["device_type"] = t.device.device_type;
  d["device_id"] = t.device.device_id;
  return d;
}

int CudaPointerDevice(uintptr_t address) {
  return Unwrap(CudaDeviceOf(reinterpret_cast<const void*>(address)));
}

}  // namespace

void BindMemory(py::module_& m) {
  m.def("dlpack_tensor", &DlpackTensor, py::arg("capsule"),
        "What an unused DLPack 'dltensor' capsule describes (address, nbytes, shape, strides, "
        "dtype code and bits, device); the capsule stays unused and keeps the memory alive.");
  m.def("cuda_pointer_device", &CudaPointerDevice, py::arg("address"),
        "The CUDA device ordinal holding device memory at `address`; FerryError when it is not "
        "device memory or no CUDA device is visible.");
}

}  // namespace ferry::python
