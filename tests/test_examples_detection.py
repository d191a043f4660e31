"""The detection and segmentation examples run end to end on their generated COCO-format set
(on the CPU here), write their pictures, and their pipelines' outputs hold what the
augmentations promise: boxes inside the picture and encoded against every default box, masks
of whole labels the same size as their images."""
import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import torch

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def picture(path):
    from torchvision.io import read_image

    return read_image(str(path))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    from torchdali.sample_data import write_coco_dataset

    return write_coco_dataset(str(tmp_path_factory.mktemp("coco")), num_images=24)


def run_main(module, monkeypatch, out):
    monkeypatch.setattr(sys, "argv", [module.__name__, "--out", str(out), "--batches", "2"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    module.main()
    return picture(out)


def test_ssd_example_writes_its_picture(tmp_path, monkeypatch):
    image = run_main(load("ssd_pipeline"), monkeypatch, tmp_path / "ssd.png")
    assert image.shape == (3, 2 * 300 + 3 * 4, 4 * 300 + 5 * 4)  # 8 images, 4 a row


def test_segmentation_example_writes_its_picture(tmp_path, monkeypatch):
    image = run_main(load("segmentation_pipeline"), monkeypatch, tmp_path / "seg.png")
    assert image.shape == (3, 2 * 256 + 3 * 4, 4 * 256 + 5 * 4)


def test_ssd_outputs(coco):
    ssd = load("ssd_pipeline")
    anchors = ssd.default_boxes()
    pipe = ssd.ssd_pipeline(*coco, anchors, False, device_id=None)
    for _ in range(3):
        normalized, encoded_boxes, encoded_labels, images, boxes, labels = pipe.run()
        assert tuple(normalized.as_torch().shape) == (8, 3, 300, 300)
        assert tuple(encoded_boxes.as_torch().shape) == (8, len(anchors) // 4, 4)
        assert tuple(encoded_labels.as_torch().shape) == (8, len(anchors) // 4)
        for i in range(8):
            b, l = np.asarray(boxes.at(i)), np.asarray(labels.at(i)).reshape(-1)
            assert np.asarray(images.at(i)).shape == (300, 300, 3)
            assert len(b) == len(l) and set(l.tolist()) <= {1, 2, 3}
            assert ((b >= 0) & (b <= 1)).all() and (b[:, 2:] >= b[:, :2]).all()
            # every object is matched to at least one default box, labelled with its class
            encoded = np.asarray(encoded_labels.at(i))
            assert set(l.tolist()) <= set(encoded.tolist()) | {0}
            assert (encoded > 0).any() == (len(l) > 0)


def test_segmentation_outputs_keep_whole_labels(coco):
    seg = load("segmentation_pipeline")
    pipe = seg.segmentation_pipeline(*coco, False, device_id=None)
    seen = set()
    for _ in range(3):
        images, masks = pipe.run()
        images, masks = images.as_torch(), masks.as_torch()
        assert tuple(images.shape) == (8, 256, 256, 3) and tuple(masks.shape) == (8, 256, 256, 1)
        assert masks.dtype == torch.uint8
        seen |= set(torch.unique(masks).tolist())
    assert seen <= {0, 1, 2, 3} and len(seen) > 1  # nearest neighbour: no blended labels
