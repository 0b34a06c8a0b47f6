// Peer memory: memfd-backed shareable host memory and mappings of peers' buffers.
#include "core/runtime/peer_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

namespace ferry {
namespace {

int64_t PageSize() {
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  return page;
}

std::string Errno(int error) { return std::strerror(error); }

}  // namespace

Result<SharedHostMemory> SharedHostMemory::Allocate(int64_t bytes, const std::string& name) {
  if (bytes < 0) return InvalidArgument("shared host memory: negative size");
  const int64_t length = std::max<int64_t>(PageSize(), (bytes + PageSize() - 1) / PageSize() * PageSize());
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return Unavailable("memfd_create(" + name + "): " + Errno(errno));
  if (::ftruncate(fd, length) != 0) {
    const int error = errno;
    ::close(fd);
    return Unavailable("shared host memory of " + std::to_string(length) + " bytes: " + Errno(error));
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int error = errno;
    ::close(fd);
    return Unavailable("mapping shared host memory of " + std::to_string(length) + " bytes: " + Errno(error));
  }
  SharedHostMemory memory;
  memory.data_ = static_cast<char*>(p);
  memory.bytes_ = bytes;
  memory.mapped_bytes_ = length;
  memory.fd_ = fd;
  return memory;
}

SharedHostMemory::SharedHostMemory(SharedHostMemory&& other) noexcept { *this = std::move(other); }

SharedHostMemory& SharedHostMemory::operator=(SharedHostMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SharedHostMemory::~SharedHostMemory() { Release(); }

void SharedHostMemory::Release() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(mapped_bytes_));
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
}

MemoryDesc SharedHostMemory::Sub(int64_t offset, int64_t bytes) const {
  MemoryDesc desc{data_ + offset, bytes, MemoryKind::kHost, -1};
  desc.shared_fd = fd_;
  desc.shared_offset = offset;
  return desc;
}

const ProcessIdentity& ProcessIdentity::Self() {
  static const ProcessIdentity* self = [] {
    auto* identity = new ProcessIdentity;
    identity->pid = ::getpid();
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, identity->boot_id);
    return identity;
  }();
  return *self;
}

Result<PeerBuffer> BufferDescriber::Describe(const MemoryDesc& memory) {
  if (memory.kind != MemoryKind::kHost) return InvalidArgument("not host memory");
  PeerBuffer buffer;
  buffer.address = reinterpret_cast<uint64_t>(memory.base);
  buffer.bytes = memory.bytes;
  buffer.shared_fd = memory.shared_fd;
  buffer.shared_offset = memory.shared_offset;
  if (memory.shared_fd < 0) return buffer;
  auto it = files_.find(memory.shared_fd);
  if (it == files_.end()) {
    struct stat st {};
    if (::fstat(memory.shared_fd, &st) != 0) {
      return InvalidArgument("shared buffer: fd " + std::to_string(memory.shared_fd) + ": " + Errno(errno));
    }
    it = files_.emplace(memory.shared_fd, std::make_pair(static_cast<uint64_t>(st.st_ino),
                                                         static_cast<int64_t>(st.st_size))).first;
  }
  if (memory.shared_offset < 0 || memory.shared_offset + memory.bytes > it->second.second) {
    return InvalidArgument("shared buffer: [" + std::to_string(memory.shared_offset) + ", +" +
                           std::to_string(memory.bytes) + ") is outside its file of " +
                           std::to_string(it->second.second) + " bytes");
  }
  buffer.inode = it->second.first;
  return buffer;
}

PeerMappings::~PeerMappings() { Clear(); }

Result<PeerMappings::File> PeerMappings::MapFile(const ProcessIdentity& owner, const PeerBuffer& buffer) {
  const auto key = std::make_tuple(owner.pid, buffer.shared_fd, buffer.inode);
  auto it = maps_.find(key);
  if (it != maps_.end()) {
    it->second.used = true;
    return File{static_cast<const char*>(it->second.base), it->second.file_bytes};
  }
  const std::string path = "/proc/" + std::to_string(owner.pid) + "/fd/" + std::to_string(buffer.shared_fd);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == EACCES || error == EPERM) {
      return FailedPrecondition("cannot open peer memory " + path + ": " + Errno(error) +
                                " (the direct intra-node path needs both processes under one user; "
                                "set executor.direct_intra_node=false to stage through the transport)");
    }
    return Unavailable("cannot open peer memory " + path + ": " + Errno(error));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_ino != buffer.inode) {
    ::close(fd);
    return Unavailable("peer memory " + path + " is not the file the peer described (fd reused?)");
  }
  const size_t length = static_cast<size_t>(std::max<int64_t>(st.st_size, 1));
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) return Unavailable("mapping peer memory " + path + ": " + Errno(error));
  Mapping& m = maps_[key];
  m.base = p;
  m.length = length;
  m.file_bytes = st.st_size;
  m.used = true;
  return File{static_cast<const char*>(p), m.file_bytes};
}

void PeerMappings::Sweep() {
  for (auto it = maps_.begin(); it != maps_.end();) {
    if (!it->second.used) {
      ::munmap(it->second.base, it->second.length);
      it = maps_.erase(it);
    } else {
      it->second.used = false;
      ++it;
    }
  }
}

void PeerMappings::Clear() {
  for (auto& [key, m] : maps_) ::munmap(m.base, m.length);
  maps_.clear();
}

}  // namespace ferry
