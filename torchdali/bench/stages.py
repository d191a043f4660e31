"""The two stages every system runs, defined once: as a pipeline of the DALI API (the same
code for torchdali and NVIDIA DALI, which is torchdali's point) and as torchvision
transforms for `torch.utils.data.DataLoader`."""
import torch

SIZE = 224          # the network's input side
VAL_RESIZE = 256    # val: the shorter side before the centre crop
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]

STAGES = {
    "train": "decode → RandomResizedCrop 224 (scale 0.08–1, ratio 3/4–4/3) → random horizontal flip "
             "→ normalize → float NCHW",
    "val": "decode → resize shorter side 256 → centre crop 224 → normalize → float NCHW",
    "train-2op": "train with the crop as its own operator: decoders.image → random_resized_crop 224 "
                 "→ random horizontal flip → normalize → float NCHW",
}
DEFAULT_STAGES = ("train", "val")  # train-2op only when asked for


def define_pipeline(lib, stage):
    """The stage as a `@pipeline_def` of `lib`, torchdali or `nvidia.dali`: the pipeline
    returns (images, labels), on the GPU when built with `gpu=True`. It reads shard
    `shard_id` of `num_shards`; `hw_decoder_load` (None: the library's default) splits the
    'mixed' decoder's batches between the hardware decoder and the hybrid path."""
    fn = lib.fn

    @lib.pipeline_def
    def pipeline(data_dir, gpu, shard_id=0, num_shards=1, hw_decoder_load=None):
        jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=stage.startswith("train"),
                                        shard_id=shard_id, num_shards=num_shards, pad_last_batch=True, name="Reader")
        return stage_images(lib, stage, jpegs, gpu, hw_decoder_load), labels.gpu() if gpu else labels

    return pipeline


def stage_images(lib, stage, jpegs, gpu, hw_decoder_load=None):
    """The stage after its reader, inside a pipeline definition of `lib`: encoded images in,
    normalized float CHW images out (decoded by the 'mixed' decoder with `gpu`), so that
    other readers feed the same stage."""
    fn, types = lib.fn, lib.types
    decoder = "mixed" if gpu else "cpu"
    split = {"hw_decoder_load": hw_decoder_load} if gpu and hw_decoder_load is not None else {}
    if stage == "train":
        images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB, **split,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
        mirror = fn.random.coin_flip(probability=0.5)
    elif stage == "train-2op":
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, **split)
        images = fn.random_resized_crop(images, size=SIZE, random_area=[0.08, 1.0],
                                        random_aspect_ratio=[3 / 4, 4 / 3])
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB, **split)
        images = fn.resize(images, resize_shorter=VAL_RESIZE)
        mirror = False
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=(SIZE, SIZE),
                                    mean=MEAN, std=STD, mirror=mirror)


def torchvision_transform(stage, normalize):
    """The stage as torchvision v2 transforms of a PIL image (decoded by ImageFolder), to a
    uint8 CHW tensor, or a normalized float one with `normalize`."""
    from torchvision.transforms import v2

    if stage.startswith("train"):
        steps = [v2.RandomResizedCrop(SIZE, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), antialias=True),
                 v2.RandomHorizontalFlip()]
    else:
        steps = [v2.Resize(VAL_RESIZE, antialias=True), v2.CenterCrop(SIZE)]
    steps.append(v2.PILToTensor())
    if normalize:
        steps += [v2.ToDtype(torch.float32), v2.Normalize(MEAN, STD)]
    return v2.Compose(steps)


class GpuNormalize:
    """The DataLoader's normalization on the GPU, as its training loop would do it: uint8
    NCHW in, float NCHW out."""

    def __init__(self, device):
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def __call__(self, images):
        return images.float().sub_(self.mean).div_(self.std)
