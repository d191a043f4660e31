"""Built-in image datasets, generated on demand: JPEGs in one folder per class, so the demo,
the benchmark, the examples and the tests need no download.

The pictures decode like photographs, not like noise: each is a window onto a generated
scene (a 1/f-spectrum texture, as natural images have, with textured objects on it),
recoloured, saved as baseline JPEG with 4:2:0 chroma subsampling."""
import io
import multiprocessing
import os

import numpy as np

# The benchmark's default set: ImageNet-like sizes and file sizes.
PHOTO_SET = dict(num_classes=10, min_size=300, max_size=800, kib=(60, 120), imagenet_sizes=True)


def write_sample_dataset(root, num_images=256, num_classes=4, min_size=256, max_size=512, seed=0,
                         kib=None, imagenet_sizes=False, workers=1):
    """Write `num_images` JPEGs in `num_classes` class folders under `root` (skipped if
    already complete); returns `root`.

    Sides lie in [min_size, max_size]: each drawn uniformly, or, with `imagenet_sizes`, as
    ImageNet's photos come (mostly 4:3 landscape, ~500x400 on average). With `kib=(lo, hi)`
    each file's size is drawn from that range and met by choosing its JPEG quality.
    `workers` > 1 writes in that many forked processes (the files are the same)."""
    kib_key = f"-{kib[0]}-{kib[1]}kib" if kib else ""
    marker = os.path.join(root, f".complete-{num_images}-{num_classes}-{min_size}-{max_size}-{seed}{kib_key}"
                                f"{'-imagenet' if imagenet_sizes else ''}")
    if os.path.exists(marker):
        return root
    for label in range(num_classes):
        os.makedirs(os.path.join(root, f"class_{label:03d}"), exist_ok=True)
    global _job
    _job = _Job(root, num_classes, min_size, max_size, seed, kib, imagenet_sizes, num_images)
    workers = min(workers, num_images // 64 + 1)
    try:
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            # Forked, so the workers share the scenes made here (a module global: a pool
            # pickles what it maps, and the scenes are large).
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                pool.map(_write_image, range(num_images), chunksize=32)
        else:
            for i in range(num_images):
                _write_image(i)
    finally:
        _job = None
    open(marker, "w").close()
    return root


def write_photo_dataset(root, num_images=4096, seed=0, workers=None):
    """The benchmark's default set (`PHOTO_SET`): ImageNet-like photos of 300-800 px a side,
    4:2:0, 60-120 KiB a file, in 10 classes; made once, then found complete."""
    return write_sample_dataset(root, num_images=num_images, seed=seed,
                                workers=workers or os.cpu_count() or 1, **PHOTO_SET)


# The COCO-format set's categories: ids with gaps, as COCO's own (1..90 for 80 classes).
COCO_CATEGORIES = [{"id": 3, "name": "disc"}, {"id": 7, "name": "box"}, {"id": 11, "name": "wedge"}]


def write_coco_dataset(root, num_images=32, seed=0):
    """A small detection / segmentation set in COCO's format under `root` (skipped if
    already complete): `images/` with JPEGs of 160-320 px a side, each with 0-4 objects
    (a disc, a box or a wedge, drawn opaque on a textured background), and
    `annotations.json` with each object's box (x, y, w, h), its outline as a polygon, its
    area and category (ids 3, 7, 11). Returns (images folder, annotations file)."""
    import json

    images_dir, annotations = os.path.join(root, "images"), os.path.join(root, "annotations.json")
    marker = os.path.join(root, f".complete-coco-{num_images}-{seed}")
    if os.path.exists(marker):
        return images_dir, annotations
    os.makedirs(images_dir, exist_ok=True)
    rng = np.random.default_rng([seed, 2 << 20])
    scene = _scene(rng, 640)
    doc = {"images": [], "annotations": [], "categories": COCO_CATEGORIES}
    for i in range(num_images):
        h, w = (int(v) for v in rng.integers(160, 321, 2))
        y, x = (int(v) for v in rng.integers(0, 640 - 320 + 1, 2))
        picture = scene[y:y + h, x:x + w].copy()
        for _ in range(int(rng.integers(0, 5))):
            category, outline = _object(rng, h, w)
            picture = _paint(picture, outline, rng.uniform(20, 235, 3))
            xs, ys = outline[:, 0], outline[:, 1]
            doc["annotations"].append({
                "id": len(doc["annotations"]) + 1, "image_id": i + 1, "category_id": category, "iscrowd": 0,
                "bbox": [float(xs.min()), float(ys.min()), float(xs.max() - xs.min()), float(ys.max() - ys.min())],
                "area": float(0.5 * abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1)))),
                "segmentation": [[round(float(v), 2) for v in outline.reshape(-1)]]})
        name = f"{i + 1:06d}.jpg"
        from PIL import Image
        with open(os.path.join(images_dir, name), "wb") as f:
            f.write(_save(Image.fromarray(np.clip(picture, 0, 255).astype(np.uint8)), 92))
        doc["images"].append({"id": i + 1, "file_name": name, "height": h, "width": w})
    with open(annotations, "w") as f:
        json.dump(doc, f)
    open(marker, "w").close()
    return images_dir, annotations


def _object(rng, h, w):
    """(category id, outline [k, 2] as (x, y) points) of one object inside an h x w picture."""
    category = int(rng.choice([c["id"] for c in COCO_CATEGORIES]))
    r = rng.uniform(0.08, 0.3) * min(h, w)
    cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
    if category == 3:  # a disc
        t = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    elif category == 7:  # a box, turned
        t = np.pi / 4 + np.arange(4) * np.pi / 2 + rng.uniform(0, np.pi / 2)
    else:  # a wedge
        t = np.sort(rng.uniform(0, 2 * np.pi, 3))
    return category, np.stack([cx + r * np.cos(t), cy + r * np.sin(t)], axis=1)


def _paint(picture, outline, colour):
    """`picture` with the polygon `outline` filled with `colour`."""
    from PIL import Image, ImageDraw

    mask = Image.new("L", (picture.shape[1], picture.shape[0]), 0)
    ImageDraw.Draw(mask).polygon([tuple(p) for p in outline], fill=255)
    inside = np.asarray(mask)[..., None] > 0
    return np.where(inside, colour.astype(np.float32), picture)


def describe_dataset(root, max_probe=2000):
    """Image count, class count, mean width/height and mean file size of an image folder
    (the pixel sizes from the headers of up to `max_probe` files spread over the set)."""
    from PIL import Image

    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files = [os.path.join(root, c, f) for c in classes for f in sorted(os.listdir(os.path.join(root, c)))
             if not f.startswith(".")]
    if not files:
        raise ValueError(f"no images found under {root!r} (expected one sub-folder per class)")
    probe = files[::max(1, len(files) // max_probe)]
    sizes = []
    for path in probe:
        with Image.open(path) as im:
            sizes.append(im.size)
    widths, heights = np.array(sizes, dtype=np.float64).T
    return {"path": os.path.abspath(root), "images": len(files), "classes": len(classes),
            "mean_width": float(widths.mean()), "mean_height": float(heights.mean()),
            "mean_kib": float(np.mean([os.path.getsize(f) for f in files]) / 1024)}


_job = None  # the set being written, for the forked workers


def _write_image(i):
    _job(i)


class _Job:
    """Writes image i of a set, cut from the set's scenes."""

    def __init__(self, root, num_classes, min_size, max_size, seed, kib, imagenet_sizes, num_images):
        self.root, self.num_classes, self.seed, self.kib = root, num_classes, seed, kib
        self.min_size, self.max_size, self.imagenet_sizes = min_size, max_size, imagenet_sizes
        rng = np.random.default_rng([seed, 1 << 20])
        side = -(-2 * max_size // 64) * 64
        self.scenes = [_scene(rng, side) for _ in range(min(8, num_images // 32 + 1))]

    def __call__(self, i):
        rng = np.random.default_rng([self.seed, i])
        image = self._picture(rng)
        data = _save(image, int(rng.integers(85, 96))) if self.kib is None else self._encode_to_size(image, rng)
        path = os.path.join(self.root, f"class_{i % self.num_classes:03d}", f"img_{i:05d}.jpg")
        with open(path, "wb") as f:
            f.write(data)

    def _picture(self, rng):
        """A recoloured window onto one of the scenes, as a PIL image."""
        from PIL import Image

        h, w = _draw_size(rng, self.min_size, self.max_size, self.imagenet_sizes)
        scene = self.scenes[rng.integers(len(self.scenes))]
        # Pictures smaller than the typical one show a wider, shrunk window: as much detail.
        zoom = float(np.clip(np.sqrt(500 * 400 / (h * w)), 1, 2)) if self.imagenet_sizes else 1.0
        wh, ww = int(h * zoom), int(w * zoom)
        y, x = (int(rng.integers(0, n - m + 1)) for n, m in zip(scene.shape, (wh, ww)))
        window = scene[y:y + wh, x:x + ww]
        if rng.random() < 0.5:
            window = window[:, ::-1]
        # Recolour: a random mix of the channels around grey, a gain and an offset; channel by
        # channel, not as a BLAS product (BLAS threads and forked writers don't mix).
        mix = (np.eye(3) * rng.uniform(0.6, 1.0) + rng.uniform(0, 0.4 / 3)) * rng.uniform(0.8, 1.2)
        offset = rng.uniform(-20, 20, 3).astype(np.float32)
        pixels = sum(window[..., c, None] * mix[:, c].astype(np.float32) for c in range(3)) + offset
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        return image.resize((w, h), Image.BILINEAR) if zoom > 1 else image

    def _encode_to_size(self, image, rng):
        """The JPEG of `image` nearest a size drawn from `kib` (kept inside it by a margin for
        the quality's steps); film grain is added where even the top quality falls short."""
        from PIL import Image

        target = rng.uniform(self.kib[0] * 1.05, self.kib[1] * 0.95) * 1024
        data, grain = _encode_near(image, target), 3.0
        while len(data) < self.kib[0] * 1024 and grain < 30:
            noisy = np.asarray(image, np.float32) + rng.normal(0, grain, (image.height, image.width, 3))
            data = _encode_near(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)), target)
            grain *= 2
        return data


def _draw_size(rng, min_size, max_size, imagenet_sizes):
    """(height, width) of one picture."""
    if not imagenet_sizes:
        return tuple(int(v) for v in rng.integers(min_size, max_size + 1, 2))
    long_side = np.clip(rng.normal(520, 110), min_size, max_size)
    aspect = rng.choice([4 / 3, 3 / 2, 1.0, 16 / 9], p=[0.6, 0.2, 0.1, 0.1])
    short_side = np.clip(long_side / aspect, min_size, max_size)
    h, w = (short_side, long_side) if rng.random() < 0.8 else (long_side, short_side)
    return int(h), int(w)


def _save(image, quality):
    """Baseline JPEG with 4:2:0 chroma subsampling, as cameras write them."""
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=quality, subsampling=2)
    return buf.getvalue()


def _encode_near(image, target_bytes):
    """The JPEG whose size is nearest `target_bytes`, by bisection over the quality."""
    lo, hi = 40, 98
    best = _save(image, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        data = _save(image, mid)
        if abs(len(data) - target_bytes) < abs(len(best) - target_bytes):
            best = data
        lo, hi = (mid, hi) if len(data) < target_bytes else (lo, mid)
    return best


def _scene(rng, side):
    """A float32 RGB scene of `side`x`side`: a 1/f texture with coloured, textured shapes."""
    from PIL import Image, ImageDraw

    texture = _pink_noise(rng, side)
    u, v = _pink_noise(rng, side, 1.4), _pink_noise(rng, side, 1.4)
    scene = (rng.uniform(60, 190, 3) + 38 * texture[..., None] + 18 * u[..., None] * rng.normal(0, 1, 3)
             + 18 * v[..., None] * rng.normal(0, 1, 3)).astype(np.float32)
    for _ in range(max(4, side // 32)):
        r = int(rng.uniform(0.02, 0.2) * side) + 2
        cy, cx = (int(c) for c in rng.integers(r, side - r, 2))
        mask = Image.new("L", (2 * r, 2 * r), 0)
        if rng.random() < 0.5:
            squash = rng.uniform(0.4, 1.0)
            ImageDraw.Draw(mask).ellipse([0, r * (1 - squash), 2 * r - 1, r * (1 + squash)], fill=255)
        else:
            angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(3, 8))))
            ImageDraw.Draw(mask).polygon([(r + r * np.cos(t), r + r * np.sin(t)) for t in angles], fill=255)
        alpha = (np.asarray(mask, np.float32) / 255)[..., None]
        ys, xs = slice(cy - r, cy + r), slice(cx - r, cx + r)
        ty, tx = (int(c) for c in rng.integers(0, side - 2 * r, 2))
        fill = rng.uniform(20, 235, 3) + rng.uniform(10, 40) * texture[ty:ty + 2 * r, tx:tx + 2 * r, None]
        scene[ys, xs] = scene[ys, xs] * (1 - alpha) + fill * alpha
    return scene


def _pink_noise(rng, side, exponent=1.0):
    """Noise whose amplitude spectrum falls as 1/f**exponent, zero mean, unit deviation."""
    fy, fx = np.fft.fftfreq(side)[:, None], np.fft.rfftfreq(side)[None, :]
    f = np.hypot(fx, fy)
    f[0, 0] = 1
    shape = (side, side // 2 + 1)
    spectrum = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) / f ** exponent
    spectrum[0, 0] = 0
    noise = np.fft.irfft2(spectrum, s=(side, side)).astype(np.float32)
    return noise / noise.std()
