"""A small built-in image dataset, generated on demand: JPEGs in one folder per class,
ImageNet-like in size, so the demo, the benchmark and the examples need no download."""
import os

import numpy as np


def write_sample_dataset(root, num_images=256, num_classes=4, min_size=256, max_size=512, seed=0):
    """Write `num_images` JPEGs of random sizes in `num_classes` class folders under
    `root` (skipped if already complete); returns `root`."""
    from PIL import Image

    marker = os.path.join(root, f".complete-{num_images}-{num_classes}-{min_size}-{max_size}-{seed}")
    if os.path.exists(marker):
        return root
    rng = np.random.default_rng(seed)
    for i in range(num_images):
        label = i % num_classes
        folder = os.path.join(root, f"class_{label:03d}")
        os.makedirs(folder, exist_ok=True)
        h, w = (int(v) for v in rng.integers(min_size, max_size + 1, 2))
        # Smooth colour fields plus noise: compresses like a photo, not like flat colour.
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        phase = rng.uniform(0, 2 * np.pi, 3)
        freq = rng.uniform(0.005, 0.05, 3)
        channels = [127 + 100 * np.sin(freq[c] * (xx + yy * (c + 1)) + phase[c]) for c in range(3)]
        img = np.stack(channels, -1) + rng.normal(0, 12, (h, w, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
            os.path.join(folder, f"img_{i:05d}.jpg"), quality=90)
    open(marker, "w").close()
    return root
