"""Short examples of the most used operators, shown in the generated operator reference
(torchdali/docs.py) and run as tests (tests/test_docs_site.py).

Each example is complete code: after PRELUDE it defines one or more `@pipeline_def`
functions, each of which builds and runs on the CPU as written (`device_id=None`). A GPU
pipeline differs only by `device_id=0` and `device="mixed"` decoding."""

PRELUDE = """\
import os, tempfile
import numpy as np
from torchdali import fn, pipeline_def, types
from torchdali.sample_data import write_sample_dataset

# JPEGs in class sub-folders (class_000, class_001, ...), as readers.file reads them
data_dir = write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-samples"), num_images=8,
                                min_size=64, max_size=128)
"""

EXAMPLES = {
    "readers.file": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def files():
    # labels: the class folders in sorted order, 0..N-1; name= for epoch_size() and the iterators
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, name="Reader")
    return jpegs, labels
""",
    "decoders.image": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def decoded():
    jpegs, labels = fn.readers.file(file_root=data_dir)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)  # "mixed": nvJPEG on the GPU
    return images, labels
""",
    "readers.webdataset": """\
from torchdali.tools.folder2wds import write_shards

shards = write_shards(data_dir, os.path.join(tempfile.gettempdir(), "torchdali-shards"), shard_size=4)


@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def from_shards():
    jpegs, labels = fn.readers.webdataset(paths=[tar for tar, _ in shards], index_paths=[idx for _, idx in shards],
                                          ext=["jpg", "cls"], dtypes=[types.UINT8, types.INT32],
                                          random_shuffle=True)
    return fn.decoders.image(jpegs), labels
""",
    "external_source": """\
def sample(info):  # called per sample with its place in the epoch
    return np.full((32, 48, 3), info.idx_in_epoch % 256, np.uint8)


@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def fed():
    images = fn.external_source(source=sample, batch=False, layout="HWC")
    return fn.flip(images, horizontal=1)
""",
    "python_function": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, exec_async=False, exec_pipelined=False)
def inverted():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.python_function(images, function=lambda image: 255 - image)  # NumPy in, NumPy out
""",
    "resize": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def resized():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    shorter = fn.resize(images, resize_shorter=48)                     # keeps the aspect ratio
    square = fn.resize(images, size=[40, 40], interp_type=types.INTERP_CUBIC)
    return shorter, square
""",
    "random_resized_crop": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def random_crops():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.random_resized_crop(images, size=[48, 48], random_area=[0.08, 1.0],
                                  random_aspect_ratio=[3 / 4, 4 / 3])
""",
    "crop_mirror_normalize": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def normalized():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.crop_mirror_normalize(
        images, crop=(48, 48), crop_pos_x=fn.random.uniform(range=(0, 1)), mirror=fn.random.coin_flip(),
        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        dtype=types.FLOAT, output_layout="CHW")
""",
    "crop": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def cropped():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.crop(images, crop=(48, 48), crop_pos_x=fn.random.uniform(range=(0, 1)),
                   crop_pos_y=fn.random.uniform(range=(0, 1)))
""",
    "flip": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def flipped():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.flip(images, horizontal=fn.random.coin_flip(), vertical=0)
""",
    "rotate": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def rotated():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.rotate(images, angle=fn.random.uniform(range=(-30, 30)), fill_value=0, keep_size=True)
""",
    "warp_affine": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def warped():
    images = fn.resize(fn.decoders.image(fn.readers.file(file_root=data_dir)[0]), size=[64, 64])
    matrix = fn.transforms.rotation(angle=fn.random.uniform(range=(-15, 15)), center=[32, 32])
    return fn.warp_affine(images, matrix=matrix, fill_value=0, inverse_map=False)
""",
    "gaussian_blur": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def blurred():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.gaussian_blur(images, sigma=fn.random.uniform(range=(0.5, 2.0)))
""",
    "color_twist": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def twisted():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.color_twist(images, brightness=fn.random.uniform(range=(0.8, 1.2)),
                          contrast=fn.random.uniform(range=(0.8, 1.2)),
                          saturation=fn.random.uniform(range=(0.5, 1.5)), hue=fn.random.uniform(range=(-20, 20)))
""",
    "hsv": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def shifted():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.hsv(images, hue=fn.random.uniform(range=(-30, 30)), saturation=1.3, value=0.9)
""",
    "brightness_contrast": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def adjusted():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.brightness_contrast(images, brightness=fn.random.uniform(range=(0.7, 1.3)), contrast=1.2)
""",
    "normalize": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def standardized():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    # each sample's channels to mean 0 and standard deviation 1 (statistics over H and W)
    return fn.normalize(images, axis_names="HW", dtype=types.FLOAT)
""",
    "cast": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def as_float():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.cast(images, dtype=types.FLOAT)
""",
    "reshape": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def pixels():
    images = fn.resize(fn.decoders.image(fn.readers.file(file_root=data_dir)[0]), size=[32, 32])
    return fn.reshape(images, shape=[-1, 3], layout="NC")  # [1024, 3]: one row per pixel
""",
    "transpose": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def planar():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.transpose(images, perm=[2, 0, 1])  # HWC -> CHW
""",
    "slice": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def centres():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.slice(images, rel_start=[0.25, 0.25], rel_shape=[0.5, 0.5], axis_names="HW")
""",
    "pad": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def padded():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    return fn.pad(images, axis_names="HW", align=[32, 32], fill_value=0)  # sides to multiples of 32
""",
    "random.uniform": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def draws():
    angle = fn.random.uniform(range=(-30.0, 30.0))          # a float per sample
    quarter = fn.random.uniform(values=[0, 90, 180, 270])   # one of the values
    offsets = fn.random.uniform(range=(0, 1), shape=[2])    # a vector per sample
    return angle, quarter, offsets
""",
    "random.coin_flip": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def mirrored():
    images = fn.decoders.image(fn.readers.file(file_root=data_dir)[0])
    mirror = fn.random.coin_flip(probability=0.5)           # 0 or 1 per sample
    return fn.flip(images, horizontal=mirror), mirror
""",
    "one_hot": """\
@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def targets():
    _, labels = fn.readers.file(file_root=data_dir)
    return fn.one_hot(fn.reshape(labels, shape=[]), num_classes=4)  # [4] float per sample
""",
}
