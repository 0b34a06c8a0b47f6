// Which memory the ucx transport moves: what the loaded UCX library says it supports (the memory
// types of ucp_context_query, never assumed from how ferry was built), the `ucx.cuda` option that
// asks for CUDA memory (auto, on, off), and the UCX transports that would carry it (cuda_copy,
// cuda_ipc, gdr_copy, from ucp_context_print_info).
//
// ferry links libucp dynamically, so the UCX in effect is whichever libucp.so.0 the loader finds
// (LD_LIBRARY_PATH), with the transport modules UCX finds next to it (UCX_MODULE_DIR): Debian's
// UCX 1.13 has no CUDA modules; a CUDA-enabled build (a cluster's own, or the PyPI wheel
// libucx-cu13) reports UCS_MEMORY_TYPE_CUDA when its CUDA module loaded and a driver is present.
//
// Pure functions apart from those taking a ucp_context_h (which ask UCX); thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ucp/api/ucp.h>

#include "core/base/status.h"

namespace ferry::ucx {

enum class CudaMode { kAuto, kOn, kOff };

// "auto", "on" or "off" (the value of ucx.cuda); anything else is kInvalidArgument naming it.
Result<CudaMode> ParseCudaMode(std::string_view text);

// The memory types `context` supports: bit UCS_BIT(ucs_memory_type_t) per type. Host memory is
// always supported and may be absent from the mask (UCX 1.13 lists only detected types).
uint64_t ContextMemoryTypes(ucp_context_h context);

// "cuda,cuda-managed" for a mask of memory types (UCX's names; "host" left out, "type N" for
// types past rocm-managed); "none" when only host remains.
std::string MemoryTypeNames(uint64_t memory_types);

// Whether the transport moves CUDA memory: under auto, when the loaded UCX supports it; under on,
// the same but a UCX without it is kFailedPrecondition (naming the UCX version, what it supports
// and how to load a CUDA-enabled one); never under off.
Result<bool> DecideCuda(CudaMode mode, uint64_t memory_types, std::string_view ucx_version);

// The "tl/dev" of every resource line of ucp_context_print_info's text, in order
// ("tcp/lo", "cuda_copy/cuda"). The lines are written by ucp_context_print_info (openucx/ucx
// src/ucp/core/ucp_context.c) as "#      resource 3  :  md 2  dev 2  flags -- cuda_copy/cuda".
std::vector<std::string> ParseResources(std::string_view print_info);

// ParseResources of `context`'s ucp_context_print_info, captured in memory.
std::vector<std::string> ContextResources(ucp_context_h context);

// Those of `resources` that move CUDA memory: cuda_copy, cuda_ipc and gdr_copy, without repeats.
std::vector<std::string> CudaTransports(const std::vector<std::string>& resources);

}  // namespace ferry::ucx
