// torchdali::decode_jpegs_cpu: a batch of JPEGs decoded on the CPU by libjpeg-turbo, each
// only within its window, straight into one output buffer (the caller's, so that it can
// recycle buffers: a fresh one of a batch's size is fresh pages from the kernel, whose
// first touch costs as much as a good part of the decode).
//
// A window is decoded as DALI's CPU decoder does it: jpeg_skip_scanlines() passes over the
// rows above it (Huffman-decoded, but neither dequantized nor transformed),
// jpeg_crop_scanline() narrows each row to the iMCU columns around it, and the rows below
// it are never decoded; its pixels are those of the whole image, cut. The images are
// shared out one at a time among torchdali's CPU threads (parallel.h; an atomic counter, so a few
// large files do not hold up one thread's share); the dispatcher releases the caller's GIL
// for the whole call. Built where libjpeg-turbo's headers were found (setup.py).
#include <ATen/ATen.h>
#include "../parallel.h"
#include <torch/library.h>

#include "../encoded.h"

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>
#include <vector>

#include <jpeglib.h>

namespace {

// decode_jpegs_cpu's status of an image (see ops.cpp).
enum Status : int32_t { kDecoded = 0, kUnsupported = 1, kCorrupt = 2, kOutside = 3 };

// Rows asked of libjpeg at a time: an iMCU row of the tallest sampling (4:2:0 gives 16).
constexpr int64_t kRows = 16;

// libjpeg reports errors by calling error_exit, which must not return: we jump back to the
// image's decode and give it up. Warnings (corrupt data that libjpeg would patch over) give
// it up too, so the caller decodes the file another way and reports what it finds.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<ErrorManager*>(cinfo->err)->jump, kCorrupt);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) std::longjmp(reinterpret_cast<ErrorManager*>(cinfo->err)->jump, kCorrupt);
}

void silent(j_common_ptr) {}

// Image `src` (n bytes) decoded to interleaved RGB within the window (y, x, h, w), into
// `out` ([h, w, 3]); `scratch` holds this thread's rows of a window whose columns are not
// iMCU-aligned. Only C objects live between the setjmp and a longjmp back to it, so the
// jump skips no destructor.
int32_t decode_window(const uint8_t* src, size_t n, const int64_t* window, bool fast_idct, uint8_t* out,
                      std::vector<uint8_t>& scratch) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  err.pub.output_message = silent;
  jpeg_create_decompress(&cinfo);
  if (int code = setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return code;
  }
  jpeg_mem_src(&cinfo, src, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);  // libjpeg has no conversion from these to RGB
    return kUnsupported;
  }
  cinfo.out_color_space = JCS_RGB;  // also from grayscale: the gray value in all three
  cinfo.dct_method = fast_idct ? JDCT_IFAST : JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  const int64_t y = window[0], x = window[1], h = window[2], w = window[3];
  if (y + h > cinfo.output_height || x + w > cinfo.output_width) {
    jpeg_destroy_decompress(&cinfo);
    return kOutside;
  }
  // The decoded columns: the window and one more on each side, widened by libjpeg to whole
  // iMCUs on the left. Fancy upsampling takes an edge column's chroma from beyond it, which
  // the margin keeps in view, so the window's pixels are those of the whole image.
  JDIMENSION left = static_cast<JDIMENSION>(std::max<int64_t>(x - 1, 0));
  JDIMENSION width = static_cast<JDIMENSION>(std::min<int64_t>(x + w + 1, cinfo.output_width)) - left;
  if (width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &left, &width);
  const bool in_place = left == x && width == w;  // rows land in `out` as they are
  const size_t pitch = size_t(w) * 3, scratch_pitch = size_t(width) * 3;
  if (!in_place) scratch.resize(scratch_pitch * kRows);
  if (y > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y));
  JSAMPROW lines[kRows];
  for (int64_t r = 0; r < h;) {
    const int64_t want = std::min<int64_t>(kRows, h - r);
    for (int64_t k = 0; k < want; ++k)
      lines[k] = in_place ? out + (r + k) * pitch : scratch.data() + k * scratch_pitch;
    const int64_t got = jpeg_read_scanlines(&cinfo, lines, static_cast<JDIMENSION>(want));
    if (got == 0) std::longjmp(err.jump, kCorrupt);
    if (!in_place)
      for (int64_t k = 0; k < got; ++k) std::memcpy(out + (r + k) * pitch, lines[k] + (x - left) * 3, pitch);
    r += got;
  }
  jpeg_destroy_decompress(&cinfo);  // the rows below the window are never decoded
  return kDecoded;
}

at::Tensor decode_jpegs_cpu(const at::Tensor& data, const at::Tensor& spans, at::Tensor windows, bool fast_idct,
                            int64_t threads, at::Tensor out) {
  const torchdali::Encoded files("decode_jpegs_cpu", data, spans);
  const int64_t n = files.size();
  TORCH_CHECK(windows.dim() == 2 && windows.size(1) == 4 && windows.size(0) == n &&
                  windows.scalar_type() == at::kLong && windows.device().is_cpu(),
              "decode_jpegs_cpu: `windows` must be an int64 CPU tensor [N, 4] (y, x, h, w), one row per image");
  windows = windows.contiguous();
  const int64_t* win = windows.data_ptr<int64_t>();
  std::vector<int64_t> offset(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* wi = win + 4 * i;
    TORCH_CHECK(wi[0] >= 0 && wi[1] >= 0 && wi[2] >= 0 && wi[3] >= 0, "decode_jpegs_cpu: windows[", i,
                "] = (", wi[0], ", ", wi[1], ", ", wi[2], ", ", wi[3], ") has a negative entry");
    offset[i + 1] = offset[i] + wi[2] * wi[3] * 3;
  }
  TORCH_CHECK(out.dim() == 1 && out.scalar_type() == at::kByte && out.device().is_cpu() && out.is_contiguous() &&
                  out.numel() == offset[n],
              "decode_jpegs_cpu: `out` must be a contiguous 1-D uint8 CPU tensor of the windows' ", offset[n],
              " bytes, got ", out.sizes(), " ", out.scalar_type());
  at::Tensor status = at::empty({n}, at::kInt);
  uint8_t* dst = out.data_ptr<uint8_t>();
  int32_t* st = status.data_ptr<int32_t>();
  std::atomic<int64_t> next{0};
  const int64_t workers = std::min<int64_t>(n, threads > 0 ? std::min<int64_t>(threads, torchdali::num_threads())
                                                             : torchdali::num_threads());
  torchdali::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    std::vector<uint8_t> scratch;
    for (int64_t i = next++; i < n; i = next++) {
      const int64_t* wi = win + 4 * i;
      st[i] = decode_window(files.data(i), size_t(files.bytes(i)), wi, fast_idct,
                            dst + offset[i], scratch);
    }
  });
  return status;
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("decode_jpegs_cpu", &decode_jpegs_cpu);
}
