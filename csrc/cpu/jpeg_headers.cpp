// What the decoders need to know of a batch of encoded files before decoding them: is it
// a JPEG, does it end with its EOI marker, its EXIF orientation, whether its chroma is
// subsampled, and its size. One call for the batch, spread over torchdali's CPU threads (parallel.h)
// without the GIL, instead of a Python parser called once per sample.
#include <ATen/ATen.h>
#include "../parallel.h"
#include <torch/library.h>

#include "../encoded.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// The columns of the result, one row per file.
enum Field { kIsJpeg, kComplete, kOrientation, kSubsampled, kHeight, kWidth, kFields };

int64_t read16(const uint8_t* p, bool little) {
  return little ? (p[0] | (p[1] << 8)) : ((p[0] << 8) | p[1]);
}

int64_t read32(const uint8_t* p, bool little) {
  return little ? (int64_t(p[0]) | (int64_t(p[1]) << 8) | (int64_t(p[2]) << 16) | (int64_t(p[3]) << 24))
                : ((int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) | (int64_t(p[2]) << 8) | int64_t(p[3]));
}

// The orientation tag (0x0112) of an EXIF TIFF block, 1 when absent or out of 1..8.
int64_t tiff_orientation(const uint8_t* t, int64_t n) {
  if (n < 8 || !((t[0] == 'I' && t[1] == 'I') || (t[0] == 'M' && t[1] == 'M'))) return 1;
  const bool little = t[0] == 'I';
  const int64_t ifd = read32(t + 4, little);
  const int64_t count = ifd + 2 <= n ? read16(t + ifd, little) : 0;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t entry = ifd + 2 + 12 * k;
    if (entry + 12 > n) continue;
    if (read16(t + entry, little) == 0x0112) {
      const int64_t value = read16(t + entry + 8, little);
      return value >= 1 && value <= 8 ? value : 1;
    }
  }
  return 1;
}

bool is_frame_marker(int marker) {  // SOF0..SOF15, less DHT (C4), JPG (C8) and DAC (CC)
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// One file's row: the marker segments before the image data (start of scan) are read;
// a field that is not found keeps its default (orientation 1, subsampled, size 0).
void parse(const uint8_t* d, int64_t n, int64_t* row) {
  row[kIsJpeg] = n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF;
  row[kComplete] = 0;
  row[kOrientation] = 1;
  row[kSubsampled] = 1;
  row[kHeight] = row[kWidth] = 0;
  if (!row[kIsJpeg]) return;
  for (int64_t i = std::max<int64_t>(0, n - 64); i + 1 < n; ++i)  // EOI, maybe padded after
    if (d[i] == 0xFF && d[i + 1] == 0xD9) row[kComplete] = 1;
  int64_t pos = 2;
  while (pos + 4 <= n && d[pos] == 0xFF) {
    const int marker = d[pos + 1];
    const int64_t length = read16(d + pos + 2, false);
    if (marker == 0xDA) break;
    const int64_t begin = pos + 4, end = std::min(n, pos + 2 + length);
    const int64_t size = std::max<int64_t>(0, end - begin);
    const uint8_t* seg = d + begin;
    if (marker == 0xE1 && row[kOrientation] == 1 && size >= 6 && std::equal(seg, seg + 6, "Exif\0\0")) {
      row[kOrientation] = tiff_orientation(seg + 6, size - 6);  // a later EXIF block may still tell
    } else if (is_frame_marker(marker) && size >= 6) {
      row[kHeight] = read16(seg + 1, false);
      row[kWidth] = read16(seg + 3, false);
      int distinct = 0, first = -1;
      for (int64_t k = 0; k < seg[5] && 8 + 3 * k <= size; ++k) {
        const int factors = seg[7 + 3 * k];
        if (first < 0) {
          first = factors;
          distinct = 1;
        } else if (factors != first) {
          distinct = 2;
        }
      }
      row[kSubsampled] = distinct > 1;
    }
    pos += 2 + length;
  }
}

at::Tensor jpeg_headers(const at::Tensor& data, const at::Tensor& spans) {
  const torchdali::Encoded files("jpeg_headers", data, spans);
  const int64_t n = files.size();
  at::Tensor out = at::empty({n, kFields}, at::kLong);
  int64_t* rows = out.data_ptr<int64_t>();
  torchdali::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) parse(files.data(i), files.bytes(i), rows + i * kFields);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("jpeg_headers", &jpeg_headers);
}
