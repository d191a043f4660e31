"""Operator implementations, one module per family; importing this package registers them all."""
from . import plumbing, arithmetic, conversions, random, external_source, readers, decoders, crop, crop_mirror_normalize, color, resize, geometry  # noqa: F401
from . import slicing, paste, decoder_crops, warp, normalize, filters, jitter, transforms, coordinates, box_encoder, segmentation, bbox_crop  # noqa: F401
from . import python_function  # noqa: F401
from . import conditional  # noqa: F401
from . import bbox_rotate, region_crops  # noqa: F401
from . import multi_paste, tensor_resize, resize_crop_mirror  # noqa: F401
from . import coco, sequences  # noqa: F401
from . import shapes, constants, reductions, noise, erase, color_spaces, image_filters, remap, dump  # noqa: F401
from . import inflate, ssd_crop  # noqa: F401
from . import numpy_reader, file_io, webdataset, tfrecord, mxnet, caffe, sequence_reader, fits  # noqa: F401
