// All torchdali operator schemas. Kernels register per backend in csrc/cpu and csrc/cuda;
// fake (meta) kernels live beside the Python faces in torchdali/kernels/<family>.py.
#include <torch/library.h>

TORCH_LIBRARY(torchdali, m) {
  // Crops each image of `images` (HWC, or CHW when `in_chw`) at `anchors[i]` = (y, x) to
  // crop_h x crop_w, flips the crop horizontally where `mirror[i]` != 0, and writes
  //   ((in - mean[c]) * inv_std[c]) * scale + shift
  // converted (rounded, saturated) to `out_dtype` into one [N, out_channels, crop_h, crop_w]
  // (out_chw) or [N, crop_h, crop_w, out_channels] tensor. Window pixels outside an image
  // take `fill[c]` as the output value (DALI's out_of_bounds_policy="pad"); channels
  // c >= C are padding and also take `fill[c]`. `mean`, `inv_std`: length 1 or C;
  // `fill`: length 1, C (padding channels then 0) or out_channels.
  m.def(
      "crop_mirror_normalize(Tensor[] images, Tensor anchors, Tensor mirror, Tensor mean, "
      "Tensor inv_std, int crop_h, int crop_w, ScalarType out_dtype, bool out_chw, "
      "int out_channels, float scale, float shift, Tensor fill, bool in_chw=False) -> Tensor");
  // crop_mirror_normalize of a dense batch [N, H, W, C] (or [N, C, H, W]), read in place.
  m.def(
      "crop_mirror_normalize.dense_in(Tensor images, Tensor anchors, Tensor mirror, "
      "Tensor mean, Tensor inv_std, int crop_h, int crop_w, ScalarType out_dtype, "
      "bool out_chw, int out_channels, float scale, float shift, Tensor fill, "
      "bool in_chw=False) -> Tensor");
  // crop_mirror_normalize of a flat batch: `images` 1-D, the samples back to back, sample i
  // of shape shapes[i] (int64 [N, 3], CPU). No tensor per sample.
  m.def(
      "crop_mirror_normalize.flat_in(Tensor images, Tensor shapes, Tensor anchors, Tensor mirror, "
      "Tensor mean, Tensor inv_std, int crop_h, int crop_w, ScalarType out_dtype, "
      "bool out_chw, int out_channels, float scale, float shift, Tensor fill, "
      "bool in_chw=False) -> Tensor");
  // Applies a per-sample affine colour transform to channel-last (HWC, FHWC, ...) images:
  //   out[c] = offsets[i, c] + sum_k matrices[i, c, k] * in[k]
  // in float32, converted (rounded half away from zero, saturated) to `out_dtype`. One output
  // per image, of its shape. Serves brightness_contrast, hsv, hue, saturation, color_twist.
  m.def(
      "color_transform(Tensor[] images, Tensor matrices, Tensor offsets, ScalarType out_dtype) "
      "-> Tensor[]");
  // color_transform of a dense batch [N, ..., C] into one [N, ..., C] tensor.
  m.def(
      "color_transform.dense(Tensor images, Tensor matrices, Tensor offsets, "
      "ScalarType out_dtype) -> Tensor");
  // Resamples each image of `images` (HWC, or CHW when `chw`) to out_sizes[2i] x
  // out_sizes[2i+1] (height, width) with DALI's separable filters. `rois` [N, 4] float =
  // (y0, x0, y1, x1) in input pixels (y1 < y0 or x1 < x0 flips; a zero-size ROI on an axis
  // means the whole axis); `interp` [N, 2] = DALI interp types (min_filter, mag_filter) per
  // sample; `antialias` widens the filter when downscaling (LINEAR -> TRIANGULAR, CUBIC,
  // LANCZOS3, GAUSSIAN). Returns one
  // [out_h, out_w, C] (or [C, out_h, out_w]) tensor of `out_dtype` (uint8, float16, float32)
  // per image; resize.dense, for one output size, returns them as one [N, ...] tensor.
  m.def(
      "resize(Tensor[] images, int[] out_sizes, Tensor rois, Tensor interp, bool antialias, "
      "ScalarType out_dtype, bool chw=False) -> Tensor[]");
  m.def(
      "resize.dense(Tensor[] images, int[] out_sizes, Tensor rois, Tensor interp, "
      "bool antialias, ScalarType out_dtype, bool chw=False) -> Tensor");
  // resize.dense of a dense batch [N, H, W, C] (or [N, C, H, W]), read in place.
  m.def(
      "resize.dense_in(Tensor images, int[] out_sizes, Tensor rois, Tensor interp, "
      "bool antialias, ScalarType out_dtype, bool chw=False) -> Tensor");
  // resize of a flat batch: `images` 1-D, the samples back to back, sample i of shape
  // shapes[i] (int64 [N, 3], CPU); the outputs back to back in one 1-D tensor, in order.
  m.def(
      "resize.flat(Tensor images, Tensor shapes, int[] out_sizes, Tensor rois, Tensor interp, "
      "bool antialias, ScalarType out_dtype, bool chw=False) -> Tensor");
  // Flips each sample of `images` (any dtype of 1, 2, 4 or 8 bytes): dims height_dim and
  // height_dim + 1 are H and W (HWC: 0, CHW: 1); sample i is mirrored left-right where
  // `horizontal[i]` != 0 and upside down where `vertical[i]` != 0. Outputs keep the shapes.
  m.def("flip(Tensor[] images, Tensor horizontal, Tensor vertical, int height_dim=0) -> Tensor[]");
  // flip of a dense batch [N, ...] (height_dim counts within a sample) into one [N, ...] tensor.
  m.def(
      "flip.dense(Tensor images, Tensor horizontal, Tensor vertical, int height_dim=0) -> "
      "Tensor");
  // Copies window i = windows[i] = (y, x, h, w) (int64 [N, 4], inside the sample) of each
  // sample of `images` (dims 0 and 1 are rows and columns, e.g. HWC; later dims are copied
  // whole; any dtype of 1, 2, 4 or 8 bytes) back to back into one 1-D tensor: sample i's
  // window as a contiguous [h, w, ...]. One call for a batch's crops, not a copy per image.
  m.def("gather_windows(Tensor[] images, Tensor windows) -> Tensor");
  // Permutes the dims of each sample: output dim k is input dim perm[k] (DALI's Transpose).
  m.def("transpose(Tensor[] images, int[] perm) -> Tensor[]");
  // Warps each image (HWC, or CHW when `chw`; uint8, float16, float32, and the label types
  // int16 and int32, which go to their own type or float32 as in DALI) with an affine map:
  // output pixel (x, y) of sample i samples the input at
  //   matrices[i] @ (x + 0.5, y + 0.5, 1)
  // (float32; row 0 gives the column, row 1 the row; input pixel (c, r) covers
  // [c, c+1) x [r, r+1)), as DALI's warp_affine with inverse_map=True. `interp[i]`: DALI interp
  // type 0 (NN: pixel floor(p), copied exactly between equal types) or 1 (LINEAR: bilinear
  // around p - 0.5, in float32). Outside the input:
  // `fill` (1 or C values; converted to out_dtype, and for LINEAR then to the input type,
  // as DALI does), or without fill the nearest edge pixel. Outputs are out_sizes[2i] x
  // out_sizes[2i+1] (height, width) of `out_dtype`, rounded half away from zero and
  // saturated. Volumes (DHWC, or CDHW when `chw`) take matrices [N, 3, 4] acting on
  // (x + 0.5, y + 0.5, z + 0.5, 1), three out_sizes each (depth, height, width), and
  // LINEAR blends the eight voxels around p - 0.5 as DALI's 3D sampler does. `.dense`
  // returns one [N, ...] tensor (all output sizes must be equal).
  m.def(
      "warp_affine(Tensor[] images, Tensor matrices, int[] out_sizes, int[] interp, "
      "Tensor? fill, ScalarType out_dtype, bool chw=False) -> Tensor[]");
  m.def(
      "warp_affine.dense(Tensor[] images, Tensor matrices, int[] out_sizes, int[] interp, "
      "Tensor? fill, ScalarType out_dtype, bool chw=False) -> Tensor");
  // Normalizes each sample: out = (in - mean) * inv_std + shift in float32, converted
  // (rounded half away from zero, saturated) to `out_dtype`. `mean` and `inv_std` hold 1
  // tensor (shared by all samples) or one per sample, each with the sample's number of dims
  // and extents 1 (broadcast) or the sample's. Inputs uint8, int8, int16, int32, float16,
  // float32. One output per sample, of its shape. Serves fn.normalize.
  m.def(
      "normalize(Tensor[] images, Tensor[] mean, Tensor[] inv_std, float shift, "
      "ScalarType out_dtype) -> Tensor[]");
  // Convolves each sample with a separable filter, one 1D window per spatial axis, innermost
  // axis first, float32 accumulation and reflect-101 borders (... 2 1 | 0 1 2 ...). Dims
  // first_axis .. first_axis + num_axes - 1 (1 to 3) are spatial; dims before them (frames,
  // leading channels) and after them (trailing channels) are not convolved across.
  // `window_sizes`: num_axes odd sizes per sample (outermost axis first); `windows`: all
  // their weights, concatenated in that order. Returns one tensor per sample, of its shape,
  // in `out_dtype` (uint8 rounded half away from zero and saturated). Serves gaussian_blur.
  m.def(
      "separable_conv(Tensor[] images, Tensor windows, int[] window_sizes, int first_axis, "
      "int num_axes, ScalarType out_dtype) -> Tensor[]");
  // Reads whole files into one 1-D uint8 buffer, back to back in order, the reads spread
  // over torchdali's CPU threads; returns it and the files' sizes (int64 [N]). A file that
  // cannot be opened or read fails the call with its path and the reason. Serves
  // readers.file.
  m.def("read_files(str[] paths) -> (Tensor, Tensor)");
  // Reads byte ranges of files into one 1-D uint8 buffer, back to back in order: range i is
  // lengths[i] bytes of paths[i] from starts[i]; a range past a file's end fails the call
  // with its path. Serves readers.webdataset (members of tar archives).
  m.def("read_ranges(str[] paths, int[] starts, int[] lengths) -> Tensor");
  // Parses a batch of TFRecord records of tf.train.Example messages: record i is
  // data[b][offset : offset + size] for (b, offset, size) = spans[i] (1-D uint8 tensors and
  // int64 [N, 3], CPU), its framing included (a uint64 length, 4 bytes of CRC, the payload, 4
  // bytes of CRC; the CRCs are not checked). Extracts the features `names` as `dtypes`
  // (tfrecord's codes: 0 int64, 1 string: the first value's bytes, 2 float32); returns
  // (values, counts, status): values[k] all records' values of feature k back to back (int64,
  // uint8, float32), counts int64 [N, K] their number per record (-1 where record i lacks
  // feature k), status int32 [N]: 0 parsed, 1 the framing does not fit the span, 2 not a valid
  // Example (counts -1). Parsed on torchdali's CPU threads. Serves readers.tfrecord.
  m.def("tfrecord_parse(Tensor[] data, Tensor spans, str[] names, int[] dtypes) -> (Tensor[], Tensor, Tensor)");
  // The decoding ops take a batch of encoded files as one 1-D uint8 CPU buffer `data` and
  // their spans in it, int64 [N, 2] (offset, size) (csrc/encoded.h).
  // Reads the headers of encoded files (data, spans): one int64 row per file of
  // (is a JPEG, ends with its EOI marker, EXIF orientation 1-8, chroma subsampled, height,
  // width), from the marker segments before the image data; a field not found keeps its
  // default (1, 1, 0, 0). Parsed on torchdali's CPU threads. Serves the image decoders.
  m.def("jpeg_headers(Tensor data, Tensor spans) -> Tensor");
  // Decodes JPEGs (data, spans) on the GPU `device` with nvJPEG, each only within
  // windows[i] = (y, x, h, w) (int64 [N, 4]; the whole image is (0, 0, height, width)), to
  // interleaved RGB uint8 on the current stream: returns (flat, status), flat holding image
  // i's window as a contiguous [h, w, 3] after those of images 0..i-1, status int32 [N] -1
  // where the hardware decoder decoded image i, 0 where the hybrid path did, else nvJPEG's
  // (positive) status code (its part of flat is unwritten).
  // `hw_load`: the fraction of the batch for the hardware decoder, where the GPU has one.
  // Built where nvJPEG was found (csrc/nvjpeg/), with its two halves declared there:
  // decode_jpegs_start (same arguments) returns once the hardware decoder has its share
  // (status -2 for those images) and the hybrid path has decoded the rest, with a handle
  // (torchdali.PendingJpegs) that decode_jpegs_finish takes: it waits for the share, orders
  // the current stream after it and returns the final status. jpeg_hardware_decoder says
  // whether `device` has the hardware decoder.
  m.def("decode_jpegs(Tensor data, Tensor spans, Tensor windows, float hw_load, Device device) -> (Tensor, Tensor)");
  m.def("jpeg_hardware_decoder(Device device) -> bool");
  // Decodes JPEGs (data, spans) on the CPU with libjpeg-turbo, each only within
  // windows[i] (as decode_jpegs), to interleaved RGB uint8 in `out` (1-D, the windows' size:
  // image i's window as a contiguous [h, w, 3] after those of images 0..i-1). Returns the
  // status, int32 [N]: 0 where image i was decoded, 1 where its colour space has no
  // conversion to RGB (CMYK, YCCK), 2 where libjpeg found it corrupt or truncated, 3 where
  // the window reaches outside it (its part of `out` is unwritten). `fast_idct`: libjpeg's
  // fast integer IDCT (JDCT_IFAST) instead of the accurate one. `threads`: at most this
  // many of torchdali's CPU threads (0: all). Built where libjpeg-turbo was found
  // (csrc/libjpeg/).
  m.def(
      "decode_jpegs_cpu(Tensor data, Tensor spans, Tensor windows, bool fast_idct, int threads, Tensor(a!) out) -> "
      "Tensor");
  // Decompresses LZ4 blocks (the block format, no frame header): chunk k, chunks[k] =
  // (in_offset, in_size, out_offset, out_size) (int64 [K, 4] on the CPU, inside both buffers),
  // is decoded from data[in_offset : in_offset + in_size] (1-D uint8) into
  // out[out_offset : out_offset + out_size] (1-D uint8 on data's device); the bytes past its
  // decoded end are zeroed. Returns the status, int32 [K] on data's device: 0 decoded,
  // 1 truncated, 2 a match offset of 0 or reaching before the chunk's output, 3 more data than
  // the chunk's output holds (on an error the chunk's output is partly written). Serves
  // decoders.inflate.
  m.def("lz4_decompress(Tensor data, Tensor chunks, Tensor(a!) out) -> Tensor");
  // Copies CPU `samples` (one dtype and number of dims, any shapes) back to back into one
  // 1-D buffer, in pinned memory when `pin_memory`; returns it and the samples' shapes as
  // int64 [N, ndim]. Serves host-to-GPU copies of a batch, and stacking a list.
  m.def("pack(Tensor[] samples, bool pin_memory=False) -> (Tensor, Tensor)");
  // The inverse of pack: views of `flat` (1-D, contiguous, any dtype and device) as
  // consecutive samples of the shapes in `shapes` (ndim values per sample, flattened).
  m.def("unpack(Tensor(a -> *) flat, int[] shapes, int ndim) -> Tensor(a)[]");
}
