"""torchdali::crop_mirror_normalize (CPU and CUDA kernels) against a float64 torch reference."""
import shutil

import pytest
import torch

from torchdali.kernels.crop_mirror_normalize import crop_mirror_normalize

from conftest import random_images

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]
SIZES = [(17, 23), (1, 1), (31, 5), (8, 40)]
# With a wide image and crop, rows are long enough for the CPU kernel's vector loops.
WIDE, WIDE_CROP = SIZES + [(7, 150), (5, 131)], (9, 83)
# Per output dtype: (scale, shift) keeping values mostly in range, with some saturation.
NORM = {torch.float32: (1.0, 0.0), torch.float16: (2.0, 0.5), torch.uint8: (64.0, 128.0),
        torch.int8: (50.0, 0.0), torch.int16: (2e4, -3.0), torch.int32: (2e9, 7.0)}


def reference(images, anchors, mirror, mean, inv_std, crop_h, crop_w, out_dtype, out_chw,
              out_channels, scale, shift, fill):
    """The op's contract in plain float64 torch, one sample at a time."""
    c = images[0].shape[2]
    mean = mean.double().cpu().expand(c)
    inv_std = inv_std.double().cpu().expand(c)
    fill = fill.double().cpu()
    if fill.numel() == 1:
        fill = fill.expand(out_channels)
    elif fill.numel() < out_channels:
        fill = torch.cat([fill, fill.new_zeros(out_channels - fill.numel())])
    outs = []
    for im, (ay, ax), m in zip(images, anchors.tolist(), mirror.tolist()):
        im = im.cpu().double()
        h, w, _ = im.shape
        ys = torch.arange(crop_h) + ay
        xs = torch.arange(crop_w)
        xs = (xs.flip(0) if m else xs) + ax
        inside = ((ys >= 0) & (ys < h))[:, None] & ((xs >= 0) & (xs < w))[None, :]
        px = im[ys.clamp(0, h - 1)][:, xs.clamp(0, w - 1)]
        v = (px - mean) * inv_std * scale + shift
        v = torch.cat([v, fill[c:].expand(crop_h, crop_w, out_channels - c)], dim=2)
        outs.append(torch.where(inside[..., None], v, fill))
    out = torch.stack(outs)
    if not out_dtype.is_floating_point:
        info = torch.iinfo(out_dtype)
        out = torch.nan_to_num(out, nan=0.0)
        out = (out.sign() * (out.abs() + 0.5).floor()).clamp(info.min, info.max)  # ties away from 0
    out = out.to(out_dtype)
    return out.permute(0, 3, 1, 2).contiguous() if out_chw else out


def make_args(sizes, in_dtype, out_dtype, out_chw, device, c=3, out_channels=4, crop=(9, 11),
              fill=None, seed=0):
    """Anchors spill over every edge of the images; mirror differs per sample."""
    g = torch.Generator().manual_seed(seed + 1)
    images = random_images(sizes, c, in_dtype, device, seed)
    anchors = torch.tensor([[int(torch.randint(-crop[0], h + 1, (1,), generator=g)),
                             int(torch.randint(-crop[1], w + 1, (1,), generator=g))]
                            for h, w in sizes], dtype=torch.int64)
    mirror = torch.tensor([i % 2 == 1 for i in range(len(sizes))])
    mean = torch.tensor([120.0, 110.0, 100.0, 90.0][:c])
    inv_std = 1.0 / torch.tensor([60.0, 55.0, 50.0, 45.0][:c])
    scale, shift = NORM[out_dtype]
    if fill is None:
        fill = torch.arange(out_channels, dtype=torch.float32) * 0.5 - 0.25
    return (images, anchors, mirror, mean, inv_std, crop[0], crop[1], out_dtype, out_chw,
            out_channels, scale, shift, fill)


def assert_matches(out, expected):
    assert out.dtype == expected.dtype and out.shape == expected.shape
    out = out.cpu()
    if expected.dtype.is_floating_point:
        tol = 1e-5 if expected.dtype == torch.float32 else 2e-3
        torch.testing.assert_close(out, expected, rtol=tol, atol=tol)
    else:
        # float32 arithmetic may land on the other side of a rounding tie than float64,
        # and carries 24 bits: large int32 values are off by their float32 spacing.
        diff = (out.long() - expected.long()).abs()
        assert (diff <= 1 + expected.double().abs() * 2.0**-22).all()
        exact = expected.double().abs() < 2**24
        assert (diff[exact] == 0).float().mean() > 0.99


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_channels", [3, 4], ids=["c3", "pad4"])
@pytest.mark.parametrize("out_chw", [False, True], ids=["hwc", "chw"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.uint8])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float16, torch.float32])
def test_matches_reference(in_dtype, out_dtype, out_chw, out_channels, device):
    args = make_args(WIDE, in_dtype, out_dtype, out_chw, device, out_channels=out_channels,
                     crop=WIDE_CROP)
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    assert out.device.type == device
    assert_matches(out, reference(*args))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_chw", [False, True], ids=["to_hwc", "to_chw"])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float16, torch.float32])
def test_chw_input_matches_reference(in_dtype, out_chw, device):
    args = make_args(WIDE + [(3, 40)], in_dtype, torch.float32, out_chw, device, c=4,
                     crop=WIDE_CROP)
    chw = [im.permute(2, 0, 1).contiguous() for im in args[0]]
    out = crop_mirror_normalize(chw, *args[1:], in_chw=True)
    assert_matches(out, reference(*args))
    torch.library.opcheck(torch.ops.torchdali.crop_mirror_normalize.default,
                          (chw, *args[1:], True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.int8, torch.int16, torch.int32])
def test_signed_integer_outputs_saturate(out_dtype, device):
    args = make_args(SIZES, torch.uint8, out_dtype, True, device, out_channels=3)
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    expected = reference(*args)
    info = torch.iinfo(out_dtype)
    assert (expected == info.max).any() or (expected == info.min).any()
    assert_matches(out, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fill", [[7.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]],
                         ids=["one", "per_input_channel", "per_output_channel"])
def test_fill_and_channel_padding(fill, device):
    args = make_args(SIZES, torch.uint8, torch.float32, False, device,
                     fill=torch.tensor(fill))
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    assert_matches(out, reference(*args))
    padding_channel = {1: 7.0, 3: 0.0, 4: 4.0}[len(fill)]
    assert (out[..., 3] == padding_channel).all()


@pytest.mark.parametrize("device", DEVICES)
def test_scalar_mean_single_channel_and_exact_window(device):
    images = random_images([(6, 8), (5, 9)], 1, torch.float32, device)
    anchors = torch.tensor([[0, 0], [0, 0]])
    mirror = torch.tensor([1, 0], dtype=torch.int32)
    args = (images, anchors, mirror, torch.tensor([3.0]), torch.tensor([0.5]), 5, 8,
            torch.float32, True, 1, 1.0, 0.0, torch.zeros(1))
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    assert_matches(out, reference(*args))
    expected0 = ((images[0][:5, :, 0].flip(1) - 3.0) * 0.5).cpu()
    torch.testing.assert_close(out[0, 0].cpu(), expected0)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_images(device):
    base = random_images([(3, 12)], 10, torch.uint8, device)[0]  # read as CHW [3, 12, 10]
    images = [base.permute(1, 2, 0), base[:, 2:, ::2].permute(1, 2, 0)]
    assert not images[0].is_contiguous()
    args = (images, torch.tensor([[1, -2], [-3, 0]]), torch.tensor([True, False]),
            torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.5, 0.25]), 7, 6,
            torch.float32, False, 3, 1.0, 0.0, torch.zeros(1))
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    assert_matches(out, reference(*args))


@pytest.mark.parametrize("device", DEVICES)
def test_python_face_defaults(device):
    images = random_images(SIZES, 3, torch.uint8, device)
    anchors = torch.zeros(len(SIZES), 2, dtype=torch.int64)
    mirror = torch.zeros(len(SIZES), dtype=torch.bool)
    out = crop_mirror_normalize(images, anchors, mirror, torch.tensor([0.0]),
                                torch.tensor([1.0]), 4, 4)
    assert out.shape == (len(SIZES), 3, 4, 4) and out.dtype == torch.float32
    torch.testing.assert_close(out[0].cpu(), images[0][:4, :4].permute(2, 0, 1).float().cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_chw", [False, True], ids=["from_hwc", "from_chw"])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float32])
def test_a_dense_input_matches_reference(in_dtype, in_chw, device):
    """A dense batch is read in place (crop_mirror_normalize.dense_in), a non-contiguous
    one too, with the results of the list form."""
    args = make_args([(23, 17)] * 6, in_dtype, torch.float32, True, device, crop=(9, 11))
    expected = reference(*args)
    batch = torch.stack(args[0])
    if in_chw:
        batch = batch.permute(0, 3, 1, 2).contiguous()
    assert_matches(crop_mirror_normalize(batch, *args[1:], in_chw=in_chw), expected)
    strided = torch.cat([batch, batch], dim=1)[:, :batch.shape[1]]  # not contiguous
    assert_matches(crop_mirror_normalize(strided, *args[1:], in_chw=in_chw), expected)
    torch.library.opcheck(torch.ops.torchdali.crop_mirror_normalize.dense_in, (batch, *args[1:], in_chw))


def flat_batch(images, in_chw=False):
    """The images (HWC) back to back in one 1-D buffer, as CHW with `in_chw`, and their shapes."""
    if in_chw:
        images = [im.permute(2, 0, 1) for im in images]
    return (torch.cat([im.reshape(-1) for im in images]),
            torch.tensor([list(im.shape) for im in images], dtype=torch.int64))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_chw", [False, True], ids=["from_hwc", "from_chw"])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float32])
def test_a_flat_input_matches_reference(in_dtype, in_chw, device):
    """Images of different sizes back to back in one buffer (crop_mirror_normalize.flat_in,
    as the decoders output them) give the results of the list form."""
    args = make_args(WIDE, in_dtype, torch.float32, True, device, crop=WIDE_CROP)
    flat, shapes = flat_batch(args[0], in_chw)
    assert_matches(crop_mirror_normalize(flat, *args[1:], in_chw=in_chw, shapes=shapes), reference(*args))
    torch.library.opcheck(torch.ops.torchdali.crop_mirror_normalize.flat_in, (flat, shapes, *args[1:], in_chw))


@pytest.mark.parametrize("device", DEVICES)
def test_a_flat_input_that_its_shapes_overrun_is_refused(device):
    args = make_args(SIZES, torch.uint8, torch.float32, True, device)
    flat, shapes = flat_batch(args[0])
    with pytest.raises(ValueError, match="more elements than the flat batch holds"):
        crop_mirror_normalize(flat[:-1], *args[1:], shapes=shapes)
    with pytest.raises(TypeError, match="`shapes` must be an int64 CPU tensor"):
        crop_mirror_normalize(flat, *args[1:], shapes=shapes.int())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_chw", [False, True], ids=["hwc", "chw"])
def test_opcheck(out_chw, device):
    args = make_args(SIZES, torch.uint8, torch.float16, out_chw, device)
    torch.library.opcheck(torch.ops.torchdali.crop_mirror_normalize.default, args)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile unavailable")
    if backend == "inductor" and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("inductor needs a C++ compiler on CPU")
    args = make_args(SIZES, torch.uint8, torch.float32, True, "cpu")
    fill = args[-1]

    def normalize(images, anchors, mirror, mean, inv_std):
        out = crop_mirror_normalize(images, anchors, mirror, mean, inv_std, 9, 11,
                                    torch.float32, True, 4, 1.0, 0.0, fill)
        return out * 2.0

    torch._dynamo.reset()
    out = torch.compile(normalize, fullgraph=True, backend=backend)(*args[:5])
    torch.testing.assert_close(out, normalize(*args[:5]))


def _call(**overrides):
    args = dict(zip(["images", "anchors", "mirror", "mean", "inv_std", "crop_h", "crop_w",
                     "out_dtype", "out_chw", "out_channels", "scale", "shift", "fill", "in_chw"],
                    make_args(SIZES, torch.uint8, torch.float32, True, "cpu") + (False,)))
    args.update(overrides)
    return torch.ops.torchdali.crop_mirror_normalize.default(*args.values())


@pytest.mark.parametrize("overrides, error, match", [
    ({"mean": torch.tensor([1.0, 2.0])}, ValueError, r"crop_mirror_normalize: `mean`"),
    ({"inv_std": torch.ones(4)}, ValueError, r"crop_mirror_normalize: `inv_std`"),
    ({"crop_h": 0}, ValueError, r"crop_mirror_normalize: `crop_h` and `crop_w`.*crop_h=0"),
    ({"crop_w": -3}, ValueError, r"crop_mirror_normalize: `crop_h` and `crop_w`.*crop_w=-3"),
    ({"images": [torch.zeros(4, 4, dtype=torch.uint8)], "anchors": torch.zeros(1, 2, dtype=torch.int64),
      "mirror": torch.zeros(1)}, ValueError, r"crop_mirror_normalize: `images` must be HWC"),
    ({"images": [torch.zeros(3, 4, 4, dtype=torch.uint8), torch.zeros(1, 4, 4, dtype=torch.uint8)],
      "anchors": torch.zeros(2, 2, dtype=torch.int64), "mirror": torch.zeros(2), "in_chw": True},
     ValueError, r"crop_mirror_normalize: all `images` must have the same number of channels"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.uint8), torch.zeros(4, 4, 1, dtype=torch.uint8)],
      "anchors": torch.zeros(2, 2, dtype=torch.int64), "mirror": torch.zeros(2)},
     ValueError, r"crop_mirror_normalize: all `images` must have the same number of channels"),
    ({"anchors": torch.zeros(3, 2, dtype=torch.int64)}, ValueError,
     r"crop_mirror_normalize: `anchors` must have shape \[4, 2\]"),
    ({"mirror": torch.zeros(2)}, ValueError, r"crop_mirror_normalize: `mirror`"),
    ({"out_channels": 2}, ValueError, r"crop_mirror_normalize: `out_channels`"),
    ({"fill": torch.ones(2)}, ValueError, r"crop_mirror_normalize: `fill`"),
    ({"out_dtype": torch.float64}, TypeError, r"crop_mirror_normalize: `out_dtype`"),
    ({"images": [torch.zeros(4, 4, 3, dtype=torch.int32)], "anchors": torch.zeros(1, 2, dtype=torch.int64),
      "mirror": torch.zeros(1)}, TypeError, r"crop_mirror_normalize: `images` must be uint8"),
    ({"images": []}, ValueError, r"crop_mirror_normalize: `images` must hold"),
])
def test_bad_arguments(overrides, error, match):
    with pytest.raises(error, match=match):
        _call(**overrides)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("params_on", ["cpu", "cuda"])
def test_cuda_parameters_on_either_device(params_on):
    args = list(make_args(SIZES * 5, torch.uint8, torch.float32, True, "cuda"))
    for k in (1, 2, 3, 4, 12):  # anchors, mirror, mean, inv_std, fill
        args[k] = args[k].to(params_on)
    out = torch.ops.torchdali.crop_mirror_normalize.default(*args)
    assert_matches(out, reference(*args))
