// File reads for the readers: whole files (readers.file) and byte ranges of files (the
// members of tar archives, readers.webdataset), plain POSIX reads straight into one output
// buffer, spread over torchdali's CPU threads (parallel.h). The dispatcher releases the caller's GIL, so
// the reads of a batch run in parallel, unlike Python threads that take the GIL back
// between the open, stat, read and close of every file.
#include <ATen/ATen.h>
#include "../parallel.h"
#include <torch/library.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// Closes the descriptor however the read ends.
struct FileDescriptor {
  int fd = -1;
  FileDescriptor() = default;
  explicit FileDescriptor(int descriptor) : fd(descriptor) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// What a file that is not a regular one is.
const char* kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "a device";
}

// Opens `path` for reading; never blocks (a FIFO swapped in after the check below).
int open_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TORCH_CHECK(fd >= 0, "cannot read '", path, "': ", std::strerror(errno));
  return fd;
}

// The whole contents of a regular file that reports no size (the pseudo-files of /proc and
// /sys): read until the end.
std::string read_unsized(const std::string& path) {
  FileDescriptor file{open_file(path)};
  std::string contents;
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(file.fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) return contents;
    contents.append(chunk, static_cast<size_t>(n));
  }
}

// Reads `size` bytes of the file `path` into `out`.
void read_file(const std::string& path, int64_t size, uint8_t* out) {
  FileDescriptor file{open_file(path)};
  int64_t got = 0;
  while (got < size) {  // a single read may return less (large files, network file systems)
    ssize_t n = ::read(file.fd, out + got, static_cast<size_t>(size - got));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    TORCH_CHECK(n > 0, "cannot read '", path, "': the file ended after ", got, " of ", size, " bytes");
    got += n;
  }
}

// Every file's contents back to back in one buffer, and their sizes: the files are
// measured, then read, each phase spread over torchdali's CPU threads. Only regular files are
// read: a FIFO, socket or device would block the reader or never end.
std::tuple<at::Tensor, at::Tensor> read_files(std::vector<std::string> paths) {
  const int64_t n = static_cast<int64_t>(paths.size());
  at::Tensor sizes = at::empty({n}, at::kLong);
  int64_t* size = sizes.data_ptr<int64_t>();
  std::vector<std::string> unsized(n);  // contents read while measuring (see read_unsized)
  torchdali::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      struct stat st;
      TORCH_CHECK(::stat(paths[i].c_str(), &st) == 0, "cannot read '", paths[i], "': ", std::strerror(errno));
      TORCH_CHECK(S_ISREG(st.st_mode), "cannot read '", paths[i], "': not a regular file (", kind(st.st_mode), ")");
      if (st.st_size == 0) unsized[i] = read_unsized(paths[i]);
      size[i] = st.st_size == 0 ? static_cast<int64_t>(unsized[i].size()) : st.st_size;
    }
  });
  std::vector<int64_t> offset(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) offset[i + 1] = offset[i] + size[i];
  at::Tensor flat = at::empty({offset[n]}, at::kByte);
  uint8_t* out = flat.data_ptr<uint8_t>();
  torchdali::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (unsized[i].empty())
        read_file(paths[i], size[i], out + offset[i]);
      else
        std::memcpy(out + offset[i], unsized[i].data(), unsized[i].size());
    }
  });
  return {flat, sizes};
}

// Byte ranges back to back in one buffer: range i is lengths[i] bytes of paths[i] from byte
// starts[i], read with positional reads (a range that runs past the file's end is an error
// naming the file: a truncated archive). Each distinct file is opened once, its descriptor
// shared by the threads' reads (a batch of small records from a few files would otherwise
// cost more in opens than in reads).
at::Tensor read_ranges(std::vector<std::string> paths, std::vector<int64_t> starts,
                       std::vector<int64_t> lengths) {
  const int64_t n = static_cast<int64_t>(paths.size());
  TORCH_CHECK_VALUE(static_cast<int64_t>(starts.size()) == n && static_cast<int64_t>(lengths.size()) == n,
                    "read_ranges: `paths`, `starts` and `lengths` must have the same length, got ", n, ", ",
                    starts.size(), " and ", lengths.size());
  std::vector<int64_t> offset(n + 1, 0), file_of(n, -1);
  std::unordered_map<std::string, int64_t> slot;
  std::vector<const std::string*> distinct;
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK_VALUE(starts[i] >= 0 && lengths[i] >= 0, "read_ranges: range ", i, " of '", paths[i],
                      "' starts at ", starts[i], " with length ", lengths[i], "; neither may be negative");
    offset[i + 1] = offset[i] + lengths[i];
    if (lengths[i] == 0) continue;
    auto found = slot.emplace(paths[i], static_cast<int64_t>(distinct.size()));
    if (found.second) distinct.push_back(&paths[i]);
    file_of[i] = found.first->second;
  }
  std::vector<FileDescriptor> files(distinct.size());
  torchdali::parallel_for(0, static_cast<int64_t>(distinct.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) files[k].fd = open_file(*distinct[k]);
  });
  at::Tensor flat = at::empty({offset[n]}, at::kByte);
  uint8_t* out = flat.data_ptr<uint8_t>();
  torchdali::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t got = 0;
      while (got < lengths[i]) {
        ssize_t r = ::pread(files[file_of[i]].fd, out + offset[i] + got, static_cast<size_t>(lengths[i] - got),
                            static_cast<off_t>(starts[i] + got));
        if (r < 0 && errno == EINTR) continue;
        TORCH_CHECK(r >= 0, "cannot read '", paths[i], "': ", std::strerror(errno));
        TORCH_CHECK(r > 0, "cannot read '", paths[i], "': it ends at byte ", starts[i] + got, ", before the ",
                    lengths[i], " bytes from ", starts[i], " (was it truncated?)");
        got += r;
      }
    }
  });
  return flat;
}

}  // namespace

// No tensor argument: the dispatcher finds the kernel under CompositeExplicitAutograd.
TORCH_LIBRARY_IMPL(torchdali, CompositeExplicitAutograd, m) {
  m.impl("read_files", &read_files);
  m.impl("read_ranges", &read_ranges);
}
