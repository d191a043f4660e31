// Whole-file reads for readers.file: plain POSIX reads straight into one output buffer,
// spread over torch's intra-op threads. The dispatcher releases the caller's GIL, so
// the reads of a batch run in parallel, unlike Python threads that take the GIL back
// between the open, stat, read and close of every file.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Closes the descriptor however the read ends.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads `size` bytes of the file `path` into `out`.
void read_file(const std::string& path, int64_t size, uint8_t* out) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  TORCH_CHECK(file.fd >= 0, "cannot read '", path, "': ", std::strerror(errno));
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
// measured, then read, each phase spread over the intra-op threads.
std::tuple<at::Tensor, at::Tensor> read_files(std::vector<std::string> paths) {
  const int64_t n = static_cast<int64_t>(paths.size());
  at::Tensor sizes = at::empty({n}, at::kLong);
  int64_t* size = sizes.data_ptr<int64_t>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      struct stat st;
      TORCH_CHECK(::stat(paths[i].c_str(), &st) == 0, "cannot read '", paths[i], "': ", std::strerror(errno));
      size[i] = st.st_size;
    }
  });
  std::vector<int64_t> offset(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) offset[i + 1] = offset[i] + size[i];
  at::Tensor flat = at::empty({offset[n]}, at::kByte);
  uint8_t* out = flat.data_ptr<uint8_t>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) read_file(paths[i], size[i], out + offset[i]);
  });
  return {flat, sizes};
}

}  // namespace

// No tensor argument: the dispatcher finds the kernel under CompositeExplicitAutograd.
TORCH_LIBRARY_IMPL(torchdali, CompositeExplicitAutograd, m) {
  m.impl("read_files", &read_files);
}
