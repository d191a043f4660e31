"""DALI's legacy class API (Pipeline subclass + ops.* + define_graph), as older DALI
tutorials write it, running on torchdali unchanged but for the import.

    python examples/legacy_ops_api.py
"""
import os
import tempfile

import numpy as np

import torchdali.ops as ops
import torchdali.types as types
from torchdali.pipeline import Pipeline
from torchdali.sample_data import write_sample_dataset

image_dir = write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"), num_images=64)
batch_size = 8


class ShuffledSimplePipeline(Pipeline):
    def __init__(self, batch_size, num_threads, device_id):
        super(ShuffledSimplePipeline, self).__init__(batch_size, num_threads, device_id, seed=12)
        self.input = ops.FileReader(file_root=image_dir, random_shuffle=True, initial_fill=21)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)

    def define_graph(self):
        jpegs, labels = self.input()
        images = self.decode(jpegs)
        return (images, labels)


pipe = ShuffledSimplePipeline(batch_size, 1, None)
pipe.build()
images, labels = pipe.run()
print("Images is_dense_tensor: " + str(images.is_dense_tensor()))
print("Labels is_dense_tensor: " + str(labels.is_dense_tensor()))
labels_tensor = labels.as_tensor()
print(labels_tensor.shape())
print(np.array(labels_tensor).ravel())
print([images.at(j).shape for j in range(batch_size)])
