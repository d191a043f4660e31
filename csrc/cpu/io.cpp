// Whole-file reads for readers.file: plain POSIX reads straight into the output tensors,
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
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

at::Tensor read_file(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  TORCH_CHECK(file.fd >= 0, "cannot read '", path, "': ", std::strerror(errno));
  struct stat st;
  TORCH_CHECK(::fstat(file.fd, &st) == 0, "cannot read '", path, "': ", std::strerror(errno));
  const int64_t size = st.st_size;
  at::Tensor out = at::empty({size}, at::kByte);
  auto* data = out.data_ptr<uint8_t>();
  int64_t got = 0;
  while (got < size) {  // a single read may return less (large files, network file systems)
    ssize_t n = ::read(file.fd, data + got, static_cast<size_t>(size - got));
    if (n < 0 && errno == EINTR) continue;
    TORCH_CHECK(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    TORCH_CHECK(n > 0, "cannot read '", path, "': the file ended after ", got, " of ", size, " bytes");
    got += n;
  }
  return out;
}

std::vector<at::Tensor> read_files(std::vector<std::string> paths) {
  std::vector<at::Tensor> out(paths.size());
  at::parallel_for(0, static_cast<int64_t>(paths.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = read_file(paths[i]);
  });
  return out;
}

}  // namespace

// No tensor argument: the dispatcher finds the kernel under CompositeExplicitAutograd.
TORCH_LIBRARY_IMPL(torchdali, CompositeExplicitAutograd, m) {
  m.impl("read_files", &read_files);
}
