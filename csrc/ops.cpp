// All torchdali operator schemas. Kernels register per backend in csrc/cpu and csrc/cuda;
// fake (meta) kernels live beside the Python faces in torchdali/kernels/<family>.py.
#include <torch/library.h>

TORCH_LIBRARY(torchdali, m) {
  // Crops each HWC image of `images` at `anchors[i]` = (y, x) to crop_h x crop_w, flips the
  // crop horizontally where `mirror[i]` != 0, and writes
  //   ((in - mean[c]) * inv_std[c]) * scale + shift
  // converted (rounded, saturated) to `out_dtype` into one [N, out_channels, crop_h, crop_w]
  // (out_chw) or [N, crop_h, crop_w, out_channels] tensor. Window pixels outside an image
  // take `fill[c]` as the output value (DALI's out_of_bounds_policy="pad"); channels
  // c >= C are padding and also take `fill[c]`. `mean`, `inv_std`: length 1 or C;
  // `fill`: length 1, C (padding channels then 0) or out_channels.
  m.def(
      "crop_mirror_normalize(Tensor[] images, Tensor anchors, Tensor mirror, Tensor mean, "
      "Tensor inv_std, int crop_h, int crop_w, ScalarType out_dtype, bool out_chw, "
      "int out_channels, float scale, float shift, Tensor fill) -> Tensor");
}
