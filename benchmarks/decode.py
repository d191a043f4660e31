"""GPU JPEG decoding alone, images/s on the benchmark's photo set (batch 256, files in
memory): torchvision's batched nvJPEG, our engine (torchdali::decode_jpegs) with the whole
batch on the hybrid path, on the hardware decoder, and split by hw_load, whole images and
random crop windows; NVIDIA DALI's 'mixed' decoder beside them when it is installed.

    python benchmarks/decode.py [--images 1024] [--batch-size 256] [--threads 8] [--loads 0,0.65,1]"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch

from torchdali.kernels.io import JPEG_FIELDS, jpeg_headers
from torchdali.kernels import nvjpeg
from torchdali.operators.windows import random_crop_windows
from torchdali.sample_data import write_photo_dataset


def rate(run, batches, n, repeats=3):
    """Best images/s over `repeats` passes of run(batch) over all batches (after a warm-up)."""
    run(batches[0])
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            run(b)
        torch.cuda.synchronize()
        best = max(best, n / (time.perf_counter() - start))
    return best


def dali_rate(files, batch_size, threads):
    try:
        from nvidia.dali import fn, pipeline_def
    except ImportError:
        return None

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=0)
    def pipe():
        data, _ = fn.readers.file(files=files)
        return fn.decoders.image(data, device="mixed")

    p = pipe()
    p.build()
    p.run()
    steps = len(files) // batch_size
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            p.run()
        best = max(best, steps * batch_size / (time.perf_counter() - start))
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--loads", default="0,0.65,0.8,1", help="hw_load values to time, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = os.path.join(tempfile.gettempdir(), "torchdali-photos")
    write_photo_dataset(root, num_images=args.images)
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(".jpg"))
    files = files[: args.images // args.batch_size * args.batch_size]
    blobs = [torch.from_file(f, size=os.path.getsize(f), dtype=torch.uint8) for f in files]
    batches = [blobs[k:k + args.batch_size] for k in range(0, len(blobs), args.batch_size)]
    n = len(blobs)
    heads = [dict(zip(JPEG_FIELDS, jpeg_headers(b).numpy().T)) for b in batches]
    sizes = [np.stack([h["height"], h["width"]], axis=1) for h in heads]
    whole = [torch.from_numpy(np.concatenate([np.zeros_like(s), s], axis=1)) for s in sizes]
    rng = np.random.default_rng(0)
    crops = [torch.from_numpy(random_crop_windows(rng, s, (0.08, 1.0), (3 / 4, 4 / 3), 10)) for s in sizes]
    device = torch.device("cuda")
    print(f"{n} photos, mean {np.concatenate(sizes).mean(axis=0).round().tolist()} px, "
          f"{np.mean([b.numel() for b in blobs]) / 1024:.0f} KiB; batch {args.batch_size}, {args.threads} threads; "
          f"{torch.cuda.get_device_name()}; hardware decoder: {nvjpeg.has_hardware_decoder(device)}")
    index = {id(b): k for k, b in enumerate(batches)}

    def engine(windows, load):
        return lambda b: nvjpeg.decode_jpegs(b, windows[index[id(b)]], load, device)

    import torchvision.io as tvio
    rows = [("torchvision decode_jpeg (cuda)", lambda b: tvio.decode_jpeg(b, device=device))]
    loads = [float(v) for v in args.loads.split(",")]
    rows += [(f"torchdali engine, whole, hw_load {load}", engine(whole, load)) for load in loads]
    rows += [(f"torchdali engine, random crop, hw_load {load}", engine(crops, load)) for load in loads]
    for name, run in rows:
        print(f"{rate(run, batches, n):10.0f} images/s  {name}", flush=True)
    dali = dali_rate(files, args.batch_size, args.threads)
    print(f"{dali:10.0f} images/s  DALI decoders.image mixed (reader included)" if dali else
          "           DALI not installed")


if __name__ == "__main__":
    main()
