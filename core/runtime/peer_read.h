// Peer reads: copying a strided region out of another process's ordinary (non-shared) host memory
// with process_vm_readv, the direct-read path for source buffers that are not SharedHostMemory
// (core/runtime/peer_memory.h maps those instead).
//
// A copy (CopyGeometry) is `rows` rows of `run` elements. ReadFromPeer gathers the peer's side as
// lists of remote iovecs, up to IOV_MAX per process_vm_readv call:
//  * rows contiguous on both sides, one dtype: each remote row lands straight in its destination
//    row (local iovec = destination row), one system call per 1024 rows;
//  * anything else (elements strided within a row on either side, or a dtype conversion): the
//    peer's rows are read into a bounded per-thread scratch (256 KiB), densely, or as the row's
//    byte span when its element gaps are small, or element by element when they are large; the
//    scratch is then scattered (converting) into the destination rows on this thread.
// Every byte read lies between the first and last element of the copy's rows, so checking the
// region's span against the peer's offered buffer (ResolveOffer) bounds the reads.
//
// Thread-safety: thread-safe (the scratch is per thread).
#pragma once

#include <cstdint>

#include "core/base/status.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

// Copies one slice of `geometry` from the address space of process `pid` (the region's byte
// offset 0 at `from_address` there) to local memory at `to` (the destination region's byte offset
// 0). Fails with kFailedPrecondition when this process may not read `pid` (ptrace access), and
// with kUnavailable naming the peer process and the remote address range when a read comes back
// short or fails (the peer exited, or the range is not mapped there).
Status ReadFromPeer(int64_t pid, const CopyGeometry& geometry, const CopySlice& slice,
                    uint64_t from_address, char* to);

}  // namespace ferry
