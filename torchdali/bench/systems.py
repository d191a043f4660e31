"""The systems the benchmark compares. Each one is opened for a stage, yields the batches of
one epoch per `epoch()` call as a training loop gets them (images and labels, on the GPU
for the GPU path), and is closed; `unavailable()` says why it cannot run here, if so."""
import gc
import importlib

import torch

from .stages import GpuNormalize, define_pipeline, torchvision_transform

DALI_INSTALL = "pip install nvidia-dali-cuda130"


class PipelineSystem:
    """torchdali or NVIDIA DALI running the stage's pipeline (the same code for both),
    consumed through the library's own DALIGenericIterator."""

    def __init__(self, key, path):
        self.key, self.path = key, path  # key: 'torchdali' or 'dali'; path: 'gpu' or 'cpu'
        self.id = f"{key}-{path}"
        self._iterator = None

    @property
    def label(self):
        name = "torchdali" if self.key == "torchdali" else f"DALI {_dali_version() or ''}".rstrip()
        return f"{name}, {'mixed decode (GPU)' if self.path == 'gpu' else 'CPU'}"

    def unavailable(self, ranks):
        if self.path == "gpu" and not torch.cuda.is_available():
            return "no CUDA device"
        if self.key == "dali":
            return _dali_import_error()
        return None

    def open(self, stage, data_dir, settings, ranks):
        lib = importlib.import_module("torchdali" if self.key == "torchdali" else "nvidia.dali")
        plugin = importlib.import_module(f"{lib.__name__}.plugin.pytorch")
        gpu = self.path == "gpu"
        # torchdali finds its shard itself; DALI is told the rank.
        shard = ("auto", "auto") if self.key == "torchdali" else (ranks.rank, ranks.world)
        pipe = define_pipeline(lib, stage)(
            data_dir, gpu, *shard, settings["hw_decoder_load"], batch_size=settings["batch_size"],
            num_threads=settings["threads"], device_id=torch.cuda.current_device() if gpu else None,
            seed=settings["seed"] + ranks.rank)
        pipe.build()
        self._iterator = plugin.DALIGenericIterator(
            [pipe], ["images", "labels"], reader_name="Reader", auto_reset=True,
            last_batch_policy=plugin.LastBatchPolicy.PARTIAL)

    def epoch(self):
        for (batch,) in self._iterator:
            yield batch["images"], batch["labels"]

    def close(self):
        self._iterator = None
        gc.collect()
        if self.key == "dali":  # DALI keeps freed GPU and pinned memory in its pools
            importlib.import_module("nvidia.dali.backend").ReleaseUnusedMemory()


class DataLoaderSystem:
    """`torch.utils.data.DataLoader` over `torchvision.datasets.ImageFolder` (PIL decoding)
    with torchvision transforms in worker processes, pinned memory and persistent workers;
    on the GPU path the training loop copies each batch to the GPU and normalizes it there."""

    def __init__(self, path, workers):
        self.path, self.workers = path, workers
        self.id = "dataloader"
        self._loader = self._normalize = None

    @property
    def label(self):
        where = "normalize on GPU" if self.path == "gpu" else "CPU"
        return f"DataLoader, {self.workers} workers, PIL + torchvision, {where}"

    def unavailable(self, ranks):
        if self.path == "gpu" and not torch.cuda.is_available():
            return "no CUDA device"
        if ranks.world > 1:
            return "the DataLoader row runs in a single process only, not under torchrun"
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            return f"torchvision does not import: {e}"
        return None

    def open(self, stage, data_dir, settings, ranks):
        from torchvision.datasets import ImageFolder

        gpu = self.path == "gpu"
        dataset = ImageFolder(data_dir, transform=torchvision_transform(stage, normalize=not gpu))
        generator = torch.Generator().manual_seed(settings["seed"])
        self._loader = torch.utils.data.DataLoader(
            dataset, batch_size=settings["batch_size"], shuffle=stage.startswith("train"), num_workers=self.workers,
            pin_memory=gpu, persistent_workers=self.workers > 0, generator=generator)
        self._normalize = GpuNormalize("cuda") if gpu else None

    def epoch(self):
        for images, labels in self._loader:
            if self._normalize is not None:
                images = self._normalize(images.cuda(non_blocking=True))
                labels = labels.cuda(non_blocking=True)
            yield images, labels

    def close(self):
        self._loader = self._normalize = None  # the persistent workers end with the loader
        gc.collect()


def make_systems(keys, paths, workers):
    """The rows to run, in table order: torchdali and DALI on each path, the DataLoader once
    (on the GPU path when there is one)."""
    systems = []
    for key in keys:
        if key == "dataloader":
            systems.append(DataLoaderSystem("gpu" if "gpu" in paths and torch.cuda.is_available() else "cpu",
                                            workers))
        else:
            systems += [PipelineSystem(key, path) for path in paths]
    return systems


def _dali_version():
    return None if _dali_import_error() else importlib.import_module("nvidia.dali").__version__


def _dali_import_error():
    """Why `nvidia.dali` does not import here, or None."""
    try:
        importlib.import_module("nvidia.dali")
    except ModuleNotFoundError:
        return f"nvidia.dali is not installed ({DALI_INSTALL})"
    except Exception as e:  # a broken install: say what broke
        return f"nvidia.dali does not import: {type(e).__name__}: {e}"
    return None
