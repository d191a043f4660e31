"""A parameter tensor on the 'meta' device next to real images: the dispatcher would run the
op's fake kernel on the real data and return uninitialised memory; every op refuses the call
by name instead (kernels.register_fake). torch.compile's fake tensors are covered by each
kernel's opcheck test."""
import pytest
import torch

pytest.importorskip("torchdali._C", reason="the C++ extension is not built")

from torchdali.kernels.color import color_transform  # noqa: E402
from torchdali.kernels.crop_mirror_normalize import crop_mirror_normalize  # noqa: E402
from torchdali.kernels.geometry import flip  # noqa: E402
from torchdali.kernels.normalize import normalize  # noqa: E402
from torchdali.kernels.resize import resize  # noqa: E402
from torchdali.kernels.separable_conv import separable_conv  # noqa: E402
from torchdali.kernels.warp import warp_affine  # noqa: E402

IMAGES = [torch.randint(0, 256, (9, 11, 3), dtype=torch.uint8), torch.randint(0, 256, (7, 5, 3), dtype=torch.uint8)]
META = torch.device("meta")

CALLS = {
    "crop_mirror_normalize mean": ("crop_mirror_normalize", lambda: crop_mirror_normalize(
        IMAGES, torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32),
        torch.zeros(3, device=META), torch.ones(3), 4, 4)),
    "crop_mirror_normalize anchors": ("crop_mirror_normalize", lambda: crop_mirror_normalize(
        IMAGES, torch.zeros(2, 2, dtype=torch.int64, device=META), torch.zeros(2, dtype=torch.int32),
        torch.zeros(3), torch.ones(3), 4, 4)),
    "resize rois": ("resize", lambda: resize(IMAGES, [(4, 4)] * 2, rois=torch.zeros(2, 4, device=META))),
    "flip flags": ("flip", lambda: flip(IMAGES, torch.ones(2, dtype=torch.int32, device=META),
                                        torch.zeros(2, dtype=torch.int32))),
    "color_transform matrices": ("color_transform", lambda: color_transform(
        IMAGES, torch.eye(3, device=META).expand(2, 3, 3).contiguous(), torch.zeros(2, 3))),
    "normalize mean": ("normalize", lambda: normalize(IMAGES, [torch.zeros(1, 1, 3, device=META)],
                                                      [torch.ones(1, 1, 3)])),
    "separable_conv windows": ("separable_conv", lambda: separable_conv(
        IMAGES, torch.ones(4, device=META), [1, 1, 1, 1], 0, 2)),
    "warp_affine matrices": ("warp_affine", lambda: warp_affine(
        IMAGES, torch.eye(2, 3, device=META).expand(2, 2, 3).contiguous(), [(4, 4)] * 2)),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_a_meta_parameter_next_to_real_images_is_refused(case):
    op, call = CALLS[case]
    with pytest.raises(ValueError, match=rf"^{op}: tensors on the 'meta' device mixed with tensors on cpu; a meta "
                                         "tensor holds no values to compute with"):
        call()


def test_an_all_meta_call_infers_shapes():
    out = torch.ops.torchdali.flip.dense(torch.empty(2, 9, 11, 3, dtype=torch.uint8, device=META),
                                         torch.ones(2, dtype=torch.int32, device=META),
                                         torch.zeros(2, dtype=torch.int32, device=META), 0)
    assert out.device.type == "meta" and out.shape == (2, 9, 11, 3)
