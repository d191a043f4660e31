"""Builds torchdali and its extension torchdali._C (C++ CPU kernels, CUDA kernels when
possible). `pip install --no-build-isolation -e .` or `python setup.py build_ext --inplace`;
TORCHDALI_CPU_ONLY=1 skips CUDA; TORCH_CUDA_ARCH_LIST picks the GPU architectures."""
import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))


def _with_cuda():
    if os.environ.get("TORCHDALI_CPU_ONLY", "0") not in ("", "0"):
        return False
    if torch.version.cuda is None or CUDA_HOME is None:
        return False
    # torch may guess CUDA_HOME from an nvcc wrapper (e.g. /usr/local/bin/nvcc -> /usr/local).
    if not os.path.exists(os.path.join(CUDA_HOME, "include", "cuda_runtime.h")):
        print(f"torchdali: no CUDA headers under CUDA_HOME={CUDA_HOME}; building CPU-only "
              "(set CUDA_HOME, e.g. /usr/local/cuda, for the CUDA kernels)")
        return False
    return os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))


def _sources(pattern):
    # Relative paths: setuptools wants them, and they keep build logs short.
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, pattern)))


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """Keeps the compiled objects in build/ of the source tree, also for pip's editable
    installs (which would use a new temporary directory each time), so ninja recompiles
    only the sources that changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(HERE, "build", "temp")


def _nvjpeg():
    """(include dir, library dir, library file) of nvJPEG: from the `nvidia-nvjpeg` wheel
    (nvidia/cu13), else from the CUDA toolkit; None where neither has it."""
    import importlib.util

    roots = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        roots += [os.path.join(p, "cu13") for p in spec.submodule_search_locations]
    roots.append(CUDA_HOME or "")
    for root in roots:
        include = os.path.join(root, "include")
        for lib in ("lib", "lib64"):
            libs = sorted(glob.glob(os.path.join(root, lib, "libnvjpeg.so*")))
            if os.path.exists(os.path.join(include, "nvjpeg.h")) and libs:
                return include, os.path.join(root, lib), os.path.basename(libs[0])
    return None


def _libjpeg_turbo():
    """(include dir or None where the compiler finds it anyway, library dir or None) of a
    libjpeg-turbo with cropped decoding (1.5 or later: jpeg_crop_scanline), from
    TORCHDALI_LIBJPEG_ROOT, the Python environment, or the system; None where none is found."""
    import sys

    roots = [os.environ.get("TORCHDALI_LIBJPEG_ROOT", ""), sys.prefix, "/usr/local", "/usr"]
    for root in filter(None, roots):
        header = os.path.join(root, "include", "jpeglib.h")
        if not os.path.exists(header):
            continue
        with open(header, errors="replace") as f:
            if "jpeg_crop_scanline" not in f.read():
                continue  # plain libjpeg, or libjpeg-turbo before 1.5
        for lib in ("lib", "lib64", os.path.join("lib", f"{os.uname().machine}-linux-gnu")):
            if glob.glob(os.path.join(root, lib, "libjpeg.so*")):
                system = root in ("/usr", "/usr/local")  # searched by default: no -I/-L to reorder
                return (None, None) if system else (os.path.join(root, "include"), os.path.join(root, lib))
    return None


def _extension():
    sources = _sources("csrc/*.cpp") + _sources("csrc/cpu/*.cpp")
    # The C++ standard is left to torch: its headers need C++17 or, from 2.10 on, C++20.
    # OpenMP: at::parallel_for is inline, and runs serially in code built without it; the
    # extension then shares torch's OpenMP runtime (libgomp.so.1, loaded by torch first), so
    # torch.set_num_threads() sets the CPU kernels' threads too.
    extra = {"cxx": ["-O3", "-fopenmp"]}
    link = ["-fopenmp"]
    libjpeg = _libjpeg_turbo()
    if libjpeg is None:
        print("torchdali: libjpeg-turbo (1.5 or later, with its headers: e.g. apt install libjpeg-turbo8-dev "
              "or libjpeg62-turbo-dev) not found; the CPU decoders decode whole images through torchvision")
    else:  # our CPU JPEG decoder, which decodes crop windows only
        include, libdir = libjpeg
        sources += _sources("csrc/libjpeg/*.cpp")
        extra["cxx"] += [f"-I{include}"] if include else []
        link += ([f"-L{libdir}", f"-Wl,-rpath,{libdir}"] if libdir else []) + ["-ljpeg"]
    if _with_cuda():
        extra["nvcc"] = ["-O3", "--expt-relaxed-constexpr"]
        sources += _sources("csrc/cuda/*.cu")
        nvjpeg = _nvjpeg()
        if nvjpeg is None:
            print("torchdali: nvJPEG not found (pip install nvidia-nvjpeg, or a CUDA toolkit with it); "
                  "'mixed' decoding goes through torchvision")
        else:  # our GPU JPEG decoder, linked to the library found, wherever it lives at run time
            include, libdir, libfile = nvjpeg
            sources += _sources("csrc/nvjpeg/*.cpp")
            # Last in the C++ flags (nvcc never sees it), so the toolkit's CUDA headers stay first.
            extra["cxx"].append(f"-I{include}")
            link += [f"-L{libdir}", f"-l:{libfile}", f"-Wl,-rpath,{libdir}"]
        return CUDAExtension("torchdali._C", sources, extra_compile_args=extra, extra_link_args=link)
    return CppExtension("torchdali._C", sources, extra_compile_args=extra, extra_link_args=link)


setup(
    name="torchdali",
    version="0.1.0",
    description="NVIDIA DALI's pipeline API, native to PyTorch",
    packages=find_packages(include=["torchdali", "torchdali.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExt},
    install_requires=["torch", "torchvision", "numpy", "pillow"],
    # remote: URLs in the readers (fsspec; aiohttp for http(s), s3fs / gcsfs for s3:// / gs://).
    extras_require={"test": ["pytest"], "remote": ["fsspec", "aiohttp"], "lmdb": ["lmdb"]},
    entry_points={"console_scripts": ["torchdali-wds2idx = torchdali.tools.wds2idx:main",
                                      "torchdali-tfrecord2idx = torchdali.tools.tfrecord2idx:main",
                                      "torchdali-folder2wds = torchdali.tools.folder2wds:main",
                                      "torchdali-rec2idx = torchdali.tools.rec2idx:main"]},
    python_requires=">=3.9",
)
