"""JPEG decoding alone, images/s on the benchmark's photo set (batch 256, files in memory),
whole images and random crop windows.

--device gpu (default): torchvision's batched nvJPEG, our engine (torchdali::decode_jpegs)
with the whole batch on the hybrid path, on the hardware decoder, and split by hw_load;
nvImageCodec's batched decode (default backends) and NVIDIA DALI's 'mixed' decoder beside
them when they are installed.

--device cpu: --threads threads, no CUDA call: torchvision's decode_jpeg per image over a
thread pool (what our pipeline's CPU path does), our CPU engine (torchdali::decode_jpegs_cpu)
where it is built, nvImageCodec's CPU backend and DALI's 'cpu' decoders when installed.

    python benchmarks/decode.py [--device gpu|cpu] [--images 1024] [--batch-size 256]
                                [--threads 8] [--loads 0,0.65,0.8,1]"""
import argparse
import concurrent.futures
import os
import tempfile
import time

import numpy as np
import torch

from torchdali.kernels.io import JPEG_FIELDS, EncodedFiles, jpeg_headers
from torchdali.operators.windows import random_crop_windows
from torchdali.sample_data import write_photo_dataset


def rate(run, batches, n, sync=lambda: None, repeats=3):
    """Best images/s over `repeats` passes of run(batch) over all batches (after a warm-up),
    each pass timed until sync() returns."""
    run(batches[0])
    sync()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            run(b)
        sync()
        best = max(best, n / (time.perf_counter() - start))
    return best


def dali_rate(files, batch_size, threads, device, crop=False):
    """DALI's decoders.image (image_random_crop if `crop`) on `device` ('mixed' or 'cpu'),
    images/s; its file reader runs in the same pipeline, so the figure includes reading
    (from the page cache). None when DALI is not installed."""
    try:
        from nvidia.dali import fn, pipeline_def
    except ImportError:
        return None

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None if device == "cpu" else 0)
    def pipe():
        data, _ = fn.readers.file(files=files)
        if crop:  # DALI draws its own windows, with our windows' parameters
            return fn.decoders.image_random_crop(data, device=device, random_area=[0.08, 1.0],
                                                 random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        return fn.decoders.image(data, device=device)

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


def import_nvimgcodec():
    """nvImageCodec's module, or None. Import it after torchvision.io, which loads libnvjpeg:
    a wheel installed apart from the nvidia-nvjpeg wheel then still finds nvJPEG."""
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def nvimgcodec_run(decoder, params, arrays, regions, stream=0):
    """run(batch) for rate(): nvImageCodec's batched decode of the batch's files, within
    regions[b] if given (None: whole images). Timed: making the code streams (header
    parsing; region streams as sub code streams) and decoding to new Images, which are only
    kept (no conversion: torch.from_dlpack would take them without a copy)."""
    nvimgcodec = import_nvimgcodec()

    def run(b):
        streams = [nvimgcodec.CodeStream(a) for a in arrays[id(b)]]
        if regions is not None:
            streams = [s.get_sub_code_stream(region=r) for s, r in zip(streams, regions[id(b)])]
        return decoder.decode(streams, params=params, cuda_stream=stream)
    return run


def nvimgcodec_rows(batches, windows, threads, device):
    """(name, run) rows for nvImageCodec, whole images and `windows` (its region decode), on
    the GPU (no backends named: nvImageCodec picks among its hardware, GPU, hybrid and CPU
    ones) or the CPU (CPU-only backend, no CUDA call), with `threads` CPU threads (it takes
    one fewer when asked for as many as there are cores)."""
    nvimgcodec = import_nvimgcodec()
    if nvimgcodec is None:
        return []
    if device.type == "cpu":
        decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                                     backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
        stream, kind = 0, "CPU backend"
    else:
        decoder = nvimgcodec.Decoder(device_id=device.index, max_num_cpu_threads=threads)
        stream, kind = torch.cuda.current_stream(device).cuda_stream, "default backends"
    params = nvimgcodec.DecodeParams(apply_exif_orientation=False)  # as torchvision and our engine
    arrays = {id(b): [x.numpy() for x in b] for b in batches}
    regions = {id(b): [nvimgcodec.Region(y, x, y + h, x + w) for y, x, h, w in win.tolist()]
               for b, win in zip(batches, windows)}
    rows = []
    for what, reg in (("whole", None), ("random crop", regions)):
        run = nvimgcodec_run(decoder, params, arrays, reg, stream)
        failed = sum(img is None for img in run(batches[0]))
        note = f" ({failed} of a batch not decoded)" if failed else ""
        rows.append((f"nvImageCodec {nvimgcodec.__version__} ({kind}), {what}{note}", run))
    return rows


def gpu_rows(batches, whole, crops, args):
    """(name, run) rows of the GPU decoders."""
    import torchvision.io as tvio
    from torchdali.kernels import nvjpeg

    device = torch.device("cuda", torch.cuda.current_device())
    print(f"GPU: {torch.cuda.get_device_name()}; hardware decoder: {nvjpeg.has_hardware_decoder(device)}")
    index = {id(b): k for k, b in enumerate(batches)}
    packed = [EncodedFiles.of(b) for b in batches]  # one buffer a batch, as readers.file gives it

    def engine(windows, load):
        return lambda b: nvjpeg.decode_jpegs(packed[index[id(b)]], windows[index[id(b)]], load, device)

    rows = [("torchvision decode_jpeg (cuda)", lambda b: tvio.decode_jpeg(b, device=device))]
    loads = [float(v) for v in args.loads.split(",")]
    rows += [(f"torchdali engine, whole, hw_load {load}", engine(whole, load)) for load in loads]
    rows += [(f"torchdali engine, random crop, hw_load {load}", engine(crops, load)) for load in loads]
    return rows + nvimgcodec_rows(batches, crops, args.threads, device)


def torchvision_cpu_run(pool, threads, windows):
    """run(batch) for rate(): torchvision's decode_jpeg image by image, the batch split into
    one chunk per worker of `pool`, each window sliced out of its image (a view) where
    `windows` maps the batch to (y, x, h, w) lists; None: whole images."""
    import torchvision.io as tvio

    def chunk(pairs):
        out = []
        for data, win in pairs:
            img = tvio.decode_jpeg(data)
            if win is not None:
                y, x, h, w = win
                img = img[:, y:y + h, x:x + w]
            out.append(img)
        return out

    def run(b):
        pairs = list(zip(b, windows[id(b)] if windows is not None else [None] * len(b)))
        step = -(-len(pairs) // threads)
        return [img for part in pool.map(chunk, [pairs[k:k + step] for k in range(0, len(pairs), step)])
                for img in part]
    return run


def cpu_rows(batches, whole, crops, args, pool):
    """(name, run) rows of the CPU decoders."""
    crop_lists = {id(b): w.tolist() for b, w in zip(batches, crops)}
    rows = [("torchvision decode_jpeg, thread pool, whole", torchvision_cpu_run(pool, args.threads, None)),
            ("torchvision decode_jpeg, thread pool, random crop (slice)",
             torchvision_cpu_run(pool, args.threads, crop_lists))]
    try:
        from torchdali.kernels import libjpeg
    except ImportError:
        libjpeg = None
    if libjpeg is not None and libjpeg.available():
        from torchdali.operators.buffers import RecycledBuffers

        index = {id(b): k for k, b in enumerate(batches)}
        packed = [EncodedFiles.of(b) for b in batches]  # one buffer a batch, as readers.file gives it
        buffers = RecycledBuffers()  # as the decoders recycle their output buffers

        def engine(windows):
            def run(b):
                w = windows[index[id(b)]]
                return libjpeg.decode_jpegs(packed[index[id(b)]], w, out=buffers.take(libjpeg.window_bytes(w)))
            return run

        for what, windows in (("whole", whole), ("random crop", crops)):
            failed = int((engine(windows)(batches[0])[1] != 0).sum())
            note = f" ({failed} of a batch not decoded)" if failed else ""
            rows.append((f"torchdali CPU engine, {what}{note}", engine(windows)))
    else:
        print("(torchdali CPU engine not built)")
    return rows + nvimgcodec_rows(batches, crops, args.threads, torch.device("cpu"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--loads", default="0,0.65,0.8,1", help="hw_load values to time (gpu), comma-separated")
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
    print(f"{n} photos, mean {np.concatenate(sizes).mean(axis=0).round().tolist()} px, "
          f"{np.mean([b.numel() for b in blobs]) / 1024:.0f} KiB; batch {args.batch_size}, {args.threads} threads")
    if args.device == "gpu":
        rows, sync, dali = gpu_rows(batches, whole, crops, args), torch.cuda.synchronize, [("mixed", False)]
    else:
        print(f"CPU: {os.cpu_count()} cores")
        pool = concurrent.futures.ThreadPoolExecutor(args.threads)
        rows, sync, dali = cpu_rows(batches, whole, crops, args, pool), lambda: None, [("cpu", False), ("cpu", True)]
    for name, run in rows:
        print(f"{rate(run, batches, n, sync):10.0f} images/s  {name}", flush=True)
    for device, crop in dali:
        r = dali_rate(files, args.batch_size, args.threads, device, crop)
        if r is None:
            print("           DALI not installed")
            break
        op = "image_random_crop" if crop else "image"
        print(f"{r:10.0f} images/s  DALI decoders.{op} {device} (reader included)", flush=True)


if __name__ == "__main__":
    main()
