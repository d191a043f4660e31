"""Times each torchdali kernel on one batch of ImageNet-sized images, against the bytes it
must move and against the equivalent torchvision v2 call on the same batch.

    python benchmarks/kernels.py                  # GPU: batch 256, ~375x500 uint8 images
    python benchmarks/kernels.py --device cpu --batch 8
    python benchmarks/kernels.py --only resize    # the rows whose name contains "resize"

Each row: the time of one call on the batch (CUDA events over back-to-back calls, host
work included: what a pipeline pays), the GPU's busy time per call (kernels and copies, from
the profiler), the bytes the kernel must read and write at the least (input pixels it reads
+ output it writes), the bandwidth those bytes make in the GPU time, that bandwidth as a
fraction of a plain device copy measured in the same run (the practical HBM bound), and
torchvision's call time for the same work (`torchvision.transforms.v2.functional`, one call
per image since the sizes differ) with our speed-up over it. Where NVIDIA DALI imports (GPU
only), the GPU time of DALI's operator on the same batch too: the profiler's GPU time of a DALI
pipeline running it on the batch (given in place, `no_copy`), less that of the same pipeline
without it, and "vs DALI", DALI's GPU time over ours (above 1x: ours is faster).
"""
import argparse
import math
import time

import torch
import torchvision
from torchvision.transforms.v2 import functional as F

from torchdali.kernels.color import color_transform
from torchdali.kernels.crop_mirror_normalize import crop_mirror_normalize
from torchdali.kernels.geometry import flip, transpose
from torchdali.kernels.normalize import normalize
from torchdali.kernels.resize import resize
from torchdali.kernels.separable_conv import separable_conv
from torchdali.kernels.warp import warp_affine

NOMINAL_GBS = {"H100": 3350.0, "H200": 4800.0}  # HBM3 / HBM3e peaks (SXM)
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def make_batch(n, device, seed=0):
    """n uint8 HWC images of ImageNet-like sizes (about 300-500 x 350-600)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [(int(torch.randint(300, 501, (1,), generator=g)), int(torch.randint(350, 601, (1,), generator=g)))
             for _ in range(n)]
    hwc = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).to(device) for h, w in sizes]
    chw = [im.permute(2, 0, 1).contiguous() for im in hwc]
    return hwc, chw


def timed(fn, device, iters):
    """Seconds per call: CUDA events on the GPU, wall time on the CPU."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def gpu_time(fn, iters):
    """Seconds of GPU activity (kernels, copies) per call, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    busy = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return busy / 1e6 / iters


def copy_bandwidth(device, iters):
    """Bytes per second of a plain 1 GiB device-to-device copy (read + write): the bound."""
    n = (1 << 30) if device == "cuda" else (1 << 26)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * n / timed(lambda: dst.copy_(src), device, iters)


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def cases(hwc, chw, device):
    """(name, ours, torchvision, DALI's operator or None, bytes moved) for each kernel; DALI's
    operator takes the batch's DataNode and the per-sample argument DataNodes it asks for
    (see dali_gpu_time)."""
    n = len(hwc)
    g = torch.Generator().manual_seed(1)
    crop = 224
    anchors = torch.tensor([[int(torch.randint(0, im.shape[0] - crop + 1, (1,), generator=g)),
                             int(torch.randint(0, im.shape[1] - crop + 1, (1,), generator=g))]
                            for im in hwc])
    mirror = torch.randint(0, 2, (n,), generator=g, dtype=torch.uint8)
    mean, inv_std = torch.tensor(MEAN), 1.0 / torch.tensor(STD)
    out_cmn = n * 3 * crop * crop * 4
    tv_mean, tv_std = [m / 255 for m in MEAN], [s / 255 for s in STD]

    def cmn_ours():
        return crop_mirror_normalize(hwc, anchors, mirror, mean, inv_std, crop, crop)

    def cmn_tv():
        outs = []
        for im, (y, x), m in zip(chw, anchors.tolist(), mirror.tolist()):
            t = F.crop(im, y, x, crop, crop)
            t = F.horizontal_flip(t) if m else t
            outs.append(F.normalize(F.to_dtype(t, torch.float32, scale=True), tv_mean, tv_std))
        return torch.stack(outs)

    yield "crop_mirror_normalize 224 -> float CHW", cmn_ours, cmn_tv, None, n * crop * crop * 3 + out_cmn

    # Resize (whole images) and random-resized-crop style ROIs, both to 224x224, linear, antialias.
    rois = torch.tensor([[y, x, y + crop, x + crop] for y, x in anchors.tolist()], dtype=torch.float32)
    rgb_out = n * crop * crop * 3

    def resize_ours():
        return resize(hwc, [(crop, crop)] * n, None, 1, True, torch.uint8, dense=True)

    def resize_tv():
        return torch.stack([F.resize(im, [crop, crop], antialias=True) for im in chw])

    yield "resize -> 224x224 (linear, antialias)", resize_ours, resize_tv, None, nbytes(hwc) + rgb_out

    def rrc_ours():
        return resize(hwc, [(176, 176)] * n, rois, 1, True, torch.uint8, dense=True)

    def rrc_tv():
        return torch.stack([F.resized_crop(im, y, x, crop, crop, [176, 176], antialias=True)
                            for im, (y, x) in zip(chw, anchors.tolist())])

    yield "resized crop 224 -> 176 (ROI)", rrc_ours, rrc_tv, None, n * crop * crop * 3 + n * 176 * 176 * 3

    flags_h, flags_v = mirror, torch.zeros(n, dtype=torch.uint8)

    def flip_ours():
        return flip(hwc, flags_h, flags_v)

    def flip_tv():
        return [F.horizontal_flip(im) if m else im.clone() for im, m in zip(chw, mirror.tolist())]

    def dali_flip(fn, images, args):
        return fn.flip(images, horizontal=args(mirror.to(torch.int32)))

    yield "flip (per-sample horizontal)", flip_ours, flip_tv, dali_flip, 2 * nbytes(hwc)

    def transpose_ours():
        return transpose(hwc, (2, 0, 1))

    def transpose_tv():
        return [im.permute(2, 0, 1).contiguous() for im in hwc]

    def dali_transpose(fn, images, args):
        return fn.transpose(images, perm=[2, 0, 1])

    yield "transpose HWC -> CHW", transpose_ours, transpose_tv, dali_transpose, 2 * nbytes(hwc)

    # brightness + contrast + saturation as one colour matrix per sample (DALI's color_twist).
    factors = torch.rand(n, 3, generator=g) * 0.4 + 0.8
    gray = torch.tensor([0.299, 0.587, 0.114])
    matrices = torch.stack([b * c * (s * torch.eye(3) + (1 - s) * gray.expand(3, 3))
                            for b, c, s in factors.tolist()])
    offsets = torch.stack([torch.full((3,), 128.0 * b * (1 - c)) for b, c, _ in factors.tolist()])

    def color_ours():
        return color_transform(hwc, matrices, offsets)

    def color_tv():
        return [F.adjust_saturation(F.adjust_contrast(F.adjust_brightness(im, b), c), s)
                for im, (b, c, s) in zip(chw, factors.tolist())]

    yield "color (brightness, contrast, saturation)", color_ours, color_tv, None, 2 * nbytes(hwc)

    angles = (torch.rand(n, generator=g) * 60 - 30).tolist()
    mats = []
    for im, a in zip(hwc, angles):
        h, w = im.shape[:2]
        c, s = math.cos(math.radians(a)), math.sin(math.radians(a))
        cx, cy = w / 2, h / 2
        mats.append([[c, -s, cx - c * cx + s * cy], [s, c, cy - s * cx - c * cy]])
    mats = torch.tensor(mats, dtype=torch.float32)
    zero = torch.zeros(1)

    def rotate_ours():
        return warp_affine(hwc, mats, [im.shape[:2] for im in hwc], 1, zero)

    def rotate_tv():
        return [F.rotate(im, a, interpolation=F.InterpolationMode.BILINEAR) for im, a in zip(chw, angles)]

    def dali_rotate(fn, images, args):
        return fn.warp_affine(images, matrix=args(mats), fill_value=0, interp_type=dali_types().INTERP_LINEAR)

    yield "rotate (warp_affine, linear, keep size)", rotate_ours, rotate_tv, dali_rotate, 2 * nbytes(hwc)

    sigma = 1.5
    radius = math.ceil(3 * sigma)
    taps = torch.exp(-0.5 * (torch.arange(-radius, radius + 1) / sigma) ** 2)
    windows = (taps / taps.sum()).float().repeat(2 * n)  # one window per axis and sample

    def blur_ours():
        return separable_conv(hwc, windows, [2 * radius + 1] * 2 * n, 0, 2)

    def blur_tv():
        return [F.gaussian_blur(im, [2 * radius + 1] * 2, [sigma, sigma]) for im in chw]

    def dali_blur(fn, images, args):
        return fn.gaussian_blur(images, sigma=sigma, window_size=2 * radius + 1)

    yield f"gaussian_blur (sigma {sigma}, {2 * radius + 1} taps)", blur_ours, blur_tv, dali_blur, 2 * nbytes(hwc)

    floats = [im.float() for im in hwc]
    floats_chw = [im.permute(2, 0, 1) for im in floats]  # the same memory, as torchvision reads it
    mean_t, inv_std_t = torch.tensor(MEAN).view(1, 1, 3), (1.0 / torch.tensor(STD)).view(1, 1, 3)

    def normalize_ours():
        return normalize(floats, [mean_t.to(hwc[0].device)], [inv_std_t.to(hwc[0].device)])

    def normalize_tv():
        return [F.normalize(im, MEAN, STD) for im in floats_chw]

    yield "normalize (float, per channel)", normalize_ours, normalize_tv, None, 2 * nbytes(floats)


def dali_types():
    from nvidia.dali import types

    return types


def dali_gpu_time(op, hwc, iters):
    """Seconds of GPU activity per batch of DALI's operator `op`: a pipeline that takes the batch
    (GPU, in place) and runs op(fn, images, args), less the same pipeline without it. `args(t)`
    turns a CPU tensor of per-sample rows into a per-sample argument DataNode. None where DALI
    doesn't import or the pipeline fails."""
    try:
        from nvidia.dali import fn, pipeline_def
    except ImportError:
        return None

    def run_time(with_op):
        @pipeline_def(batch_size=len(hwc), num_threads=4, device_id=hwc[0].device.index or 0,
                      prefetch_queue_depth=1)
        def pipe():
            images = fn.external_source(source=lambda: hwc, device="gpu", layout="HWC", no_copy=True)

            def args(t):
                rows = [r.numpy() for r in t]
                return fn.external_source(source=lambda: rows)

            return op(fn, images, args) if with_op else images

        p = pipe()
        p.build()
        return gpu_time(p.run, iters)

    try:
        return run_time(True) - run_time(False)
    except Exception as e:  # a DALI version without the operator or argument
        print(f"DALI: {type(e).__name__}: {str(e).splitlines()[0]}")
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default="", help="time only the kernels whose name contains this")
    a = parser.parse_args()
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    nominal = next((v for k, v in NOMINAL_GBS.items() if k in name), None)
    hwc, chw = make_batch(a.batch, a.device)
    bound = copy_bandwidth(a.device, a.iters) / 1e9
    print(f"{name}; torch {torch.__version__}, torchvision {torchvision.__version__}; batch {a.batch} "
          f"uint8 images of ~{nbytes(hwc) / a.batch / 1e3:.0f} kB; device copy {bound:.0f} GB/s"
          + (f" (nominal {nominal:.0f} GB/s)" if nominal else ""))
    header = (f"{'kernel':42} {'call ms':>8} {'GPU ms':>7} {'MB':>7} {'GB/s':>7} {'of copy':>7} "
              f"{'DALI GPU ms':>11} {'vs DALI':>7} {'tv ms':>8} {'speed-up':>8}")
    print(header)
    print("-" * len(header))
    for label, ours, tv, dali_op, moved in cases(hwc, chw, a.device):
        if a.only not in label:
            continue
        t_ours = timed(ours, a.device, a.iters)
        t_gpu = gpu_time(ours, a.iters) if a.device == "cuda" else t_ours
        t_tv = timed(tv, a.device, max(1, a.iters // 4))
        t_dali = dali_gpu_time(dali_op, hwc, a.iters) if dali_op and a.device == "cuda" else None
        gbs = moved / t_gpu / 1e9
        dali = f"{t_dali * 1e3:11.2f} {t_dali / t_gpu:6.2f}x" if t_dali else f"{'-':>11} {'-':>7}"
        print(f"{label:42} {t_ours * 1e3:8.2f} {t_gpu * 1e3:7.2f} {moved / 1e6:7.1f} {gbs:7.0f} "
              f"{gbs / bound:7.0%} {dali} {t_tv * 1e3:8.2f} {t_tv / t_ours:7.1f}x")


if __name__ == "__main__":
    main()
