"""A first torchdali pipeline on the built-in sample data: read, decode, crop, flip,
normalize. Runs on the GPU (mixed nvJPEG decoding) when one is present, else on the CPU.

    python examples/first_pipeline.py
"""
import os
import tempfile

import torch

import torchdali as dali
from torchdali import fn, types
from torchdali.sample_data import write_sample_dataset


@dali.pipeline_def(batch_size=8, num_threads=2, seed=12)
def pipeline(data_dir, gpu):
    jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True, initial_fill=32, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.crop_mirror_normalize(images, crop=(224, 224), mirror=fn.random.coin_flip(),
                                      mean=[128.0], std=[64.0], dtype=types.FLOAT, output_layout=types.NCHW)
    return images, labels


def main():
    gpu = torch.cuda.is_available()
    data = write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"), num_images=64)
    pipe = pipeline(data, gpu, device_id=0 if gpu else None)
    print("epoch size:", pipe.epoch_size("Reader"), "| reader meta:", pipe.reader_meta("Reader"))
    images, labels = pipe.run()
    batch = images.as_torch()  # one dense tensor, handed over without a copy
    print(type(images).__name__, tuple(batch.shape), batch.dtype, batch.device)
    print("labels:", labels.as_torch().flatten().tolist())


if __name__ == "__main__":
    main()
