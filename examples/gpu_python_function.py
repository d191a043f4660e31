"""Python functions on GPU data, as DALI's tutorial "Processing GPU Data with Python Operators"
writes it, on the built-in sample data (or an image folder, --data):

- fn.python_function(device="gpu"): the function gets and returns CuPy arrays, here a swap of
  the outside of a circle between two images, and a CUDA kernel (cupy.ElementwiseKernel) that
  interleaves their channels;
- fn.dl_tensor_python_function(device="gpu", synchronize_stream=True, batch_processing=False):
  the function gets DLPack tensors and must finish its own GPU work before it returns;
- an operator applied to a list of DataNodes (fn.decoders.image([a, b]), fn.resize([a, b]));
- exec_async=False, exec_pipelined=False, which Python functions on the GPU used to need.

It checks that both ways of running the kernel give the same images, and with --out writes
the outputs as a PNG (a row per output). GPU only: it needs a CUDA GPU and CuPy
(pip install cupy-cuda12x, or the package for your CUDA); without them it says so and exits
with status 0.

    python examples/gpu_python_function.py [--out gpu_python_function.png] [--batch-size 4]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch

import torchdali.fn as fn
import torchdali.types as types
from torchdali.pipeline import Pipeline
from torchdali.sample_data import write_sample_dataset

try:
    import cupy
except ImportError:
    cupy = None

# A CUDA kernel: channel 0 of every pixel from the second image, the others from the first.
MIX_CHANNELS = None if cupy is None else cupy.ElementwiseKernel(
    "uint8 x, uint8 y", "uint8 z", "z = (i % 3) ? x : y", "mix_channels")


def edit_images(image1, image2):
    """Swap the two images outside a centred circle (CuPy arrays, as NumPy would do it)."""
    assert image1.shape == image2.shape
    h, w, c = image1.shape
    y, x = cupy.ogrid[0:h, 0:w]
    mask = (x - w / 2) ** 2 + (y - h / 2) ** 2 > h * w / 9
    result1 = cupy.copy(image1)
    result1[mask] = image2[mask]
    result2 = cupy.copy(image2)
    result2[mask] = image1[mask]
    return result1, result2


def mix_channels_wrapper(tensor1, tensor2):
    """The kernel on DLPack tensors: DALI has synchronized its stream before the call
    (synchronize_stream=True); the function finishes its own work before returning."""
    array1 = cupy.from_dlpack(tensor1)  # the tutorial's cupy.fromDlpack, deprecated in CuPy
    array2 = cupy.from_dlpack(tensor2)
    result = MIX_CHANNELS(array1, array2)
    cupy.cuda.get_current_stream().synchronize()
    return result.toDlpack()


def two_resized_inputs(image_dir):
    input1, _ = fn.readers.file(file_root=image_dir, random_shuffle=True)
    input2, _ = fn.readers.file(file_root=image_dir, random_shuffle=True)
    im1, im2 = fn.decoders.image([input1, input2], device="mixed", output_type=types.RGB)
    return fn.resize([im1, im2], device="gpu", resize_x=300, resize_y=300)


def python_function_pipe(image_dir, batch_size):
    pipe = Pipeline(batch_size=batch_size, num_threads=4, device_id=0, exec_async=False, exec_pipelined=False,
                    seed=99)
    with pipe:
        res1, res2 = two_resized_inputs(image_dir)
        out1, out2 = fn.python_function(res1, res2, device="gpu", function=edit_images, num_outputs=2)
        out3 = fn.python_function(res1, res2, device="gpu", function=MIX_CHANNELS)
        pipe.set_outputs(out1, out2, out3)
    return pipe


def dltensor_function_pipe(image_dir, batch_size):
    pipe = Pipeline(batch_size=batch_size, num_threads=4, device_id=0, exec_async=False, exec_pipelined=False,
                    seed=99)
    with pipe:
        res1, res2 = two_resized_inputs(image_dir)
        out = fn.dl_tensor_python_function(res1, res2, device="gpu", function=mix_channels_wrapper,
                                           synchronize_stream=True, batch_processing=False)
        pipe.set_outputs(out)
    return pipe


def write_rows(batches, path):
    """The batches (TensorListCPU of HWC uint8 images of one size) as a PNG, a row each."""
    from PIL import Image

    rows = [np.concatenate([np.asarray(b.at(i)) for i in range(len(b))], axis=1) for b in batches]
    Image.fromarray(np.concatenate(rows, axis=0)).save(path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--out", help="write the outputs as a PNG here")
    p.add_argument("--data", metavar="DIR", help="an image folder (one sub-folder per class) instead")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() or cupy is None:
        print("gpu_python_function.py needs a CUDA GPU and CuPy (pip install cupy-cuda12x); "
              f"here: GPU {torch.cuda.is_available()}, CuPy {cupy is not None}. Nothing to do.")
        return 0
    image_dir = args.data or write_sample_dataset(os.path.join(tempfile.gettempdir(), "torchdali-sample-data"),
                                                  num_images=64)

    pipe = python_function_pipe(image_dir, args.batch_size)
    pipe.build()
    ims1, ims2, ims3 = (out.as_cpu() for out in pipe.run())  # move the batches to host memory to look at them
    print("python_function outputs:", [ims.at(0).shape for ims in (ims1, ims2, ims3)])

    pipe = dltensor_function_pipe(image_dir, args.batch_size)
    pipe.build()
    (ims,) = pipe.run()
    ims = ims.as_cpu()
    same = all(np.array_equal(ims.at(i), ims3.at(i)) for i in range(args.batch_size))
    print("dl_tensor_python_function gives the same images as python_function:", same)
    if args.out:
        write_rows([ims1, ims2, ims3, ims], args.out)
        print("wrote", args.out)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
