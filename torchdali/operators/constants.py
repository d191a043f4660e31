"""Constants, copies, types and metadata: `constant`, `full`, `ones`, `zeros` and their `*_like` forms,
`one_hot`, `cast_like`, `copy` and `peek_image_shape`."""
import functools
import io

import numpy as np
import torch

from .. import types
from ..schema import BOOL, DTYPE, FLOAT, IMAGE_TYPE, INT, INTS, LAYOUT, STR, Arg, ArgType, register
from ..tensor_list import TensorList
from .base import BatchSpec, Operator
from .conversions import cast_batch, convert_saturate

# The types DALI's constant-value operators produce.
_VALUE_TYPES = (types.UINT8, types.INT8, types.UINT16, types.INT16, types.UINT32, types.INT32, types.UINT64,
                types.INT64, types.FLOAT, types.FLOAT16, types.FLOAT64, types.BOOL)
_SHAPE = Arg("shape", INTS, None, "Shape of the output data (a scalar when not given).", per_sample=True,
             check=lambda v: "dimensions must not be negative" if any(d < 0 for d in v) else None)
_LAYOUT = Arg("layout", LAYOUT, None, "Output layout. If set and not empty, the layout must match the "
                                      "dimensionality of the output.")


def _dtype_arg(default, doc):
    return Arg("dtype", DTYPE, default, doc, choices=_VALUE_TYPES)


class _ConstantValue(Operator):
    """The shared form: each output sample's shape comes from the `shape` argument or the
    `data_like` input, its values from a constant or the `fill_value` input, broadcast as
    DALI broadcasts them; values are converted to the output type with saturation."""

    like = False  # the first input gives the shape, type and layout
    value = None  # the constant (zeros, ones), or None: the `fill_value` input gives it

    def plan(self, inputs):
        a = self.spec.args
        self.layout = str(a.get("layout") or "")
        per_sample_shape = "shape" in self.spec.arg_input_names
        ndim = inputs[0].ndim if self.like else None if per_sample_shape else len(a.get("shape") or ())
        if self.layout and ndim is not None:
            self._check_layout(ndim)
        source = inputs[0].dtype if inputs else None  # data_like's type, or fill_value's
        dtype = self.output_dtype(source) if source is not None or not inputs else None
        return [BatchSpec("cpu", dtype, ndim, inputs[0].layout if self.like else self.layout)], self.step

    def _check_layout(self, ndim):
        if len(self.layout) != ndim:
            raise self.error(f"layout '{self.layout}' has {len(self.layout)} dimensions but the output has {ndim}",
                             ValueError)

    def output_dtype(self, source):
        """The output's torch type: `dtype` where given, else that of the input (`source`) that gives it."""
        if self.spec.args.get("dtype") is not None:
            return types.to_torch_type(self.spec.args["dtype"])
        if self.like or self.value is None:
            return types.to_torch_type(source)
        return torch.int32

    def output_shapes(self, inputs, args, n):
        """The output samples' shapes, int64 [n, ndim]."""
        if self.like:
            try:
                return np.asarray(inputs[0].sample_shapes(), np.int64)
            except ValueError as e:
                raise self.error(f"data_like: {e}", ValueError) from None
        if not args.is_per_sample("shape"):
            rows = np.asarray(args["shape"] or [], np.int64).reshape(1, -1)
        else:
            rows = args.batch("shape")
            if isinstance(rows, list):
                raise self.error("argument input 'shape' gives a different number of dimensions per sample; "
                                 "every sample's shape must have the same number", ValueError)
        return np.broadcast_to(rows, (n, rows.shape[1]))

    def step(self, inputs, args, ctx):
        n = len(inputs[0]) if inputs else ctx.batch_size
        shapes = self.output_shapes(inputs, args, n)
        if self.layout:
            self._check_layout(shapes.shape[1])
        layout = inputs[0].layout() if self.like else self.layout
        if n == 0:
            return [TensorList.make([], layout, device="cpu")]
        dtype = self._checked_dtype(inputs)
        dense = bool((shapes == shapes[0]).all())
        if self.value is not None:
            if dense:
                return [TensorList.make(torch.full((n,) + tuple(shapes[0].tolist()), self.value, dtype=dtype), layout)]
            return [TensorList.make([torch.full(tuple(s), self.value, dtype=dtype) for s in shapes.tolist()], layout)]
        return [TensorList.make(self._filled(inputs[-1], shapes, dense, dtype), layout, device="cpu")]

    def _checked_dtype(self, inputs):
        dtype = self.output_dtype(inputs[0].dtype if inputs else None)
        if types.to_dali_type(dtype) not in _VALUE_TYPES:
            raise self.error(f"data type {types.to_dali_type(dtype).name} is not supported; supported types are "
                             f"{', '.join(t.name for t in _VALUE_TYPES)}", TypeError)
        return dtype

    def _filled(self, fill, shapes, dense, dtype):
        """The output samples of `shapes` filled from the `fill` batch (one dense tensor where it can be)."""
        if len(fill) != len(shapes):
            raise self.error(f"fill_value has {len(fill)} samples for a batch of {len(shapes)}", ValueError)
        try:
            fill_shapes = fill.sample_shapes()
        except ValueError as e:
            raise self.error(f"fill_value: {e}", ValueError) from None
        values = fill.dense_tensor()
        if dense and values is not None:
            index = self._index(tuple(shapes[0].tolist()), tuple(fill_shapes[0].tolist()), 0)
            out = values.reshape(len(values), -1)[:, index].reshape((len(values),) + tuple(shapes[0].tolist()))
            return convert_saturate(out, dtype)
        out = []
        for i, (shape, value) in enumerate(zip(shapes.tolist(), fill.as_torch_list())):
            index = self._index(tuple(shape), tuple(value.shape), i)
            out.append(convert_saturate(value.reshape(-1)[index].reshape(shape), dtype))
        return out

    def _index(self, shape, fill_shape, i):
        try:
            return _broadcast_index(shape, fill_shape)
        except ValueError as e:
            raise self.error(f"sample {i}: {e}", ValueError, sample=i) from None


@functools.lru_cache(maxsize=256)
def _broadcast_index(shape, fill_shape):
    """For each element of an output of `shape`, the flat index of its value in a fill value
    of `fill_shape`, as DALI broadcasts: dimensions compared from the innermost, each equal or
    one of them 1 (missing ones count as 1). A fill value whose elements lie along its last
    dimension repeats over the flat output; otherwise a dimension that differs from the
    output's reads index 0 of it."""
    for d, f in zip(reversed((1,) * (len(fill_shape) - len(shape)) + shape),
                    reversed((1,) * (len(shape) - len(fill_shape)) + fill_shape)):
        if d != f and d != 1 and f != 1:
            raise ValueError(f"the fill value's shape {fill_shape} can't be broadcast to the output shape {shape}")
    size, fill_size = int(np.prod(shape)), int(np.prod(fill_shape))
    if fill_size == 0:
        if size:
            raise ValueError(f"the fill value is empty (shape {fill_shape}); there is nothing to fill {shape} with")
        return torch.zeros(0, dtype=torch.int64)
    if not fill_shape or fill_shape[-1] == fill_size:
        return torch.arange(size) % fill_size
    index = np.zeros(shape, np.int64)
    stride = 1
    for j, f in zip(range(len(shape) - 1, -1, -1), reversed(fill_shape[-len(shape):] if shape else ())):
        if f == shape[j]:
            index += (np.arange(f) * stride).reshape((-1,) + (1,) * (len(shape) - 1 - j))
            stride *= f
    return torch.from_numpy(index.reshape(-1))


@register("full", inputs=(1, 1), input_names=("fill_value",), args=[_SHAPE, _LAYOUT])
class Full(_ConstantValue):
    """Returns new data of given shape and type, filled with a fill value.

    If the fill_value is not a scalar, it must be broadcastable to the output shape (NumPy-style broadcasting).
    Dimensions are compared from innermost to outermost, and each dimension must either match or one of them
    must be 1. In case of different dimensionality, the input shape is padded with 1s for the missing outermost
    dimensions. The output has the fill value's type."""


@register("full_like", inputs=(2, 2), input_names=("data_like", "fill_value"))
class FullLike(_ConstantValue):
    """Returns new data with the same shape, type and layout as the input data, filled with a `fill_value`.

    If the fill_value is not a scalar, it must be broadcastable to the output shape (NumPy-style broadcasting),
    as in `full`."""

    like = True


@register("zeros", args=[_SHAPE, _dtype_arg(types.INT32, "Output data type."), _LAYOUT])
class Zeros(_ConstantValue):
    """Returns new data of given shape and type, filled with zeros."""

    value = 0


@register("ones", args=[_SHAPE, _dtype_arg(types.INT32, "Output data type."), _LAYOUT])
class Ones(_ConstantValue):
    """Returns new data of given shape and type, filled with ones."""

    value = 1


@register("zeros_like", inputs=(1, 1), input_names=("data_like",),
          args=[_dtype_arg(None, "Overrides the output data type.")])
class ZerosLike(_ConstantValue):
    """Returns new data with the same shape, type and layout as the input array, filled with zeros."""

    like, value = True, 0


@register("ones_like", inputs=(1, 1), input_names=("data_like",),
          args=[_dtype_arg(None, "Overrides the output data type.")])
class OnesLike(_ConstantValue):
    """Returns new data with the same shape, type and layout as the input array, filled with ones."""

    like, value = True, 1


# --- one_hot ---------------------------------------------------------------------------

_ONE_HOT_TYPES = (types.UINT8, types.INT8, types.UINT16, types.INT16, types.UINT32, types.INT32, types.UINT64,
                  types.INT64, types.FLOAT, types.FLOAT64)
# Unsigned outputs are computed in the signed type of their width and reinterpreted (the same bits).
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def _one_axis_name(v):
    return None if len(v) == 1 else "must be a single character"


@register("one_hot", devices=("cpu", "gpu"), inputs=(1, 1),
          args=[Arg("num_classes", INT, 0, "Number of all classes in the data.",
                    check=lambda v: None if v >= 0 else "must not be negative"),
                Arg("axis", INT, None, "Dimension to place the one-hot encoding axis of `num_classes` size (-1: "
                                       "the last). By default it's appended as the last dimension for non-scalar "
                                       "inputs; for scalar inputs it becomes the only dimension."),
                Arg("dtype", DTYPE, types.FLOAT, "Output data type.", choices=_ONE_HOT_TYPES),
                Arg("on_value", FLOAT, 1.0, "Value that marks the given class; cast to `dtype`."),
                Arg("off_value", FLOAT, 0.0, "Value that marks the other classes; cast to `dtype`."),
                Arg("axis_name", STR, None, "Single character naming the new dimension in the output layout; "
                                            "without it, the output layout is empty.", check=_one_axis_name)])
class OneHot(Operator):
    """Produces a one-hot encoding of the input.

    Adds a new axis of `num_classes` elements at `axis`: ``output[x0, .., xk-1, i, xk, .., xn]`` is `on_value`
    where ``i == input[x0, .., xn]`` (converted to int) and `off_value` elsewhere. For backward compatibility,
    an input in which every sample has exactly one element (whatever its number of dimensions) is taken as
    scalars, each becoming a vector of `num_classes`, unless `axis` is given."""

    def plan(self, inputs):
        a = self.spec.args
        self.dtype = types.to_torch_type(a["dtype"])
        self.work = _SIGNED.get(self.dtype, self.dtype)
        self.on, self.off = (torch.tensor(_as_output_value(a[k], self.dtype)).view(self.work).item()
                             for k in ("on_value", "off_value"))
        ndim = inputs[0].ndim
        if ndim is not None:
            self._check_axis(ndim)
        out_ndim = ndim + 1 if ndim is not None and a["axis"] is not None else None
        return [BatchSpec(inputs[0].device, self.dtype, out_ndim, None)], self.step

    def _check_axis(self, ndim):
        axis = self.spec.args["axis"]
        if axis is not None and not -1 <= axis <= ndim:
            raise self.error(f"axis = {axis} is out of range for an input of {ndim} dims; expected -1 to {ndim}",
                             ValueError)

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        if batch.dtype in (types.BOOL, types.FLOAT16):
            raise self.error(f"the input type {batch.dtype.name} is not supported; supported types are "
                             f"{', '.join(t.name for t in _ONE_HOT_TYPES)}", TypeError)
        if not len(batch):
            return [TensorList.make([], device=batch.device)]
        try:
            shapes = batch.sample_shapes()
        except ValueError as e:
            raise self.error(str(e), ValueError) from None
        self._check_axis(shapes.shape[1])
        axis = self.spec.args["axis"]
        scalars = axis is None and bool((shapes.prod(axis=1) == 1).all())
        layout = self._layout(batch, scalars, shapes.shape[1])
        if scalars:
            flat, _ = batch.flat()
            return [TensorList.make(self._encode(flat.reshape(-1), 1), layout, device=batch.device)]
        place = shapes.shape[1] if axis is None or axis == -1 else axis
        dense = batch.dense_tensor()
        if dense is not None:
            return [TensorList.make(self._encode(dense, place + 1), layout, device=batch.device)]
        return [TensorList.make([self._encode(s, place) for s in batch.as_torch_list()], layout, device=batch.device)]

    def _layout(self, batch, scalars, ndim):
        name = self.spec.args["axis_name"]
        if not name:
            return ""
        if scalars:
            return name
        layout = batch.layout()
        if len(layout) != ndim:
            raise self.error(f"axis_name needs an input layout of {ndim} dims, got '{layout}'", ValueError)
        axis = self.spec.args["axis"]
        place = ndim if axis is None or axis == -1 else axis
        return layout[:place] + name + layout[place:]

    def _encode(self, x, dim):
        """`x`'s classes one-hot along a new dimension `dim` of the output."""
        n = self.spec.args["num_classes"]
        if x.is_floating_point():  # C++'s int conversion truncates; anything beyond the classes is no class
            cls = torch.nan_to_num(x.trunc(), nan=-1.0).clamp(-1, n).to(torch.int64)
        elif x.dtype in (torch.uint32, torch.int64, torch.uint64):  # wrapped to 32 bits, as C++'s int
            cls = x.to(torch.int32).to(torch.int64)
        else:
            cls = x.to(torch.int64)
        classes = torch.arange(n, device=x.device).reshape((n,) + (1,) * (x.dim() - dim))
        out = torch.where(cls.unsqueeze(dim) == classes, torch.tensor(self.on, dtype=self.work, device=x.device),
                          torch.tensor(self.off, dtype=self.work, device=x.device))
        return out.view(self.dtype) if self.work != self.dtype else out


def _as_output_value(value, dtype):
    """A float argument as C++'s conversion to the output type makes it: through a float32, truncated
    and wrapped for integer types."""
    v = np.float32(value)
    if dtype.is_floating_point:
        return np.array(v, types.to_numpy_type(types.to_dali_type(dtype)))
    integer = np.int64(np.trunc(v)) if np.isfinite(v) else np.int64(0)
    return np.array(integer).astype(types.to_numpy_type(types.to_dali_type(dtype)))


# --- cast_like, copy --------------------------------------------------------------------

@register("cast_like", devices=("cpu", "gpu"), inputs=(2, 2))
class CastLike(Operator):
    """Cast the first tensor to the type of the second tensor, rounding and saturating as `cast` does."""

    def plan(self, inputs):
        spec = inputs[0]
        return [BatchSpec(spec.device, inputs[1].dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch, like = inputs
        if len(like) != len(batch):
            raise self.error(f"the inputs have {len(batch)} and {len(like)} samples", ValueError)
        return [cast_batch(self, batch, types.to_torch_type(like.dtype))]


@register("copy", devices=("cpu", "gpu"), inputs=(1, 1))
class Copy(Operator):
    """Creates a copy of the input tensor."""

    def plan(self, inputs):
        spec = inputs[0]
        return [BatchSpec(spec.device, spec.dtype, spec.ndim, spec.layout)], self.step

    def step(self, inputs, args, ctx):
        batch = inputs[0]
        same = dict(layout=batch.layout(), device=batch.device, source_info=batch.source_info)
        if not len(batch):
            return [TensorList.make([], **same)]
        try:
            flat, shapes = batch.flat()
        except ValueError:  # samples of different ndim: one copy each
            return [TensorList.make([s.clone() for s in batch.as_torch_list()], **same)]
        fresh = batch.dense_tensor() is None and batch.held_flat() is None  # flat() concatenated the samples
        return [TensorList.from_flat(flat if fresh else flat.clone(), shapes, **same)]


# --- peek_image_shape -------------------------------------------------------------------

_SHAPE_TYPES = (types.INT32, types.UINT32, types.INT64, types.UINT64, types.FLOAT, types.FLOAT64)
# Pillow's names of the formats DALI's decoder reads besides JPEG, and its modes' channel counts.
_FORMATS = ("PNG", "BMP", "TIFF", "WEBP", "JPEG2000", "PPM")
_MODE_CHANNELS = {"1": 1, "L": 1, "P": 3, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1, "LA": 2, "RGB": 3,
                  "YCbCr": 3, "RGBA": 4, "CMYK": 4, "PA": 4}
_TRANSPOSED = (5, 6, 7, 8)  # EXIF orientations that swap height and width


@register("peek_image_shape", inputs=(1, 1),
          deprecated_names=("experimental.peek_image_shape",),
          args=[Arg("dtype", DTYPE, types.INT64, "Data type, to which the sizes are converted.", choices=_SHAPE_TYPES),
                Arg("image_type", IMAGE_TYPE, types.RGB, "Color format of the image: it decides the number of "
                                                         "channels (ANY_DATA: the file's own)."),
                Arg("adjust_orientation", BOOL, True, "Use the EXIF orientation metadata when calculating the "
                                                      "shape.")])
class PeekImageShape(Operator):
    """Obtains the shape of the encoded image: the shape (H, W, C) it would have after decoding, read from
    its header without decoding it. JPEG headers are read in one C++ call for the batch; other formats
    (PNG, BMP, TIFF, WebP, JPEG 2000, PNM) through Pillow's header parsing.

    In most cases the optimal solution is to call `shape()` on the decoded images; use this operator if
    you do not intend to decode the images in your pipeline."""

    def plan(self, inputs):
        a = self.spec.args
        self.dtype = types.to_torch_type(a["dtype"])
        self.channels = {types.GRAY: 1, types.ANY_DATA: None}.get(a["image_type"], 3)
        return [BatchSpec("cpu", self.dtype, 1, "")], self.step

    def step(self, inputs, args, ctx):
        from ..kernels.io import JPEG_FIELDS, jpeg_headers

        batch = inputs[0]
        if not len(batch):
            return [TensorList.make(torch.zeros((0, 3), dtype=self.dtype), device="cpu")]
        files = batch.as_torch_list()
        for i, f in enumerate(files):
            if f.dtype != torch.uint8 or f.dim() != 1:
                raise self.error(f"sample {i}: expected encoded bytes (1D uint8), got {tuple(f.shape)} {f.dtype}",
                                 TypeError, sample=i)
        head = dict(zip(JPEG_FIELDS, jpeg_headers(files).numpy().T))
        shapes = np.stack([head["height"], head["width"], np.full(len(files), self.channels or 0)], 1)
        orientation = head["orientation"].copy()
        for i in np.flatnonzero((head["is_jpeg"] == 0) | (head["height"] == 0) | (self.channels is None)).tolist():
            shapes[i], orientation[i] = self._read_header(files[i], i, head["is_jpeg"][i] == 1)
        if self.spec.args["adjust_orientation"]:
            turn = np.isin(orientation, _TRANSPOSED)
            shapes[turn, :2] = shapes[turn, 1::-1]
        return [TensorList.make(torch.from_numpy(shapes).to(self.dtype), device="cpu")]

    def _read_header(self, data, i, is_jpeg):
        """(height, width, channels) and the EXIF orientation of file i, from Pillow's header parsing."""
        from PIL import Image, UnidentifiedImageError

        if data.numel() == 0:
            raise self.error(f"sample {i}: the file is empty", ValueError, sample=i)
        try:
            with Image.open(io.BytesIO(data.numpy().tobytes())) as img:
                if img.format not in _FORMATS + ("JPEG",) or img.width == 0 or img.height == 0:
                    raise UnidentifiedImageError()
                orientation = img.getexif().get(0x0112, 1) if img.format in ("JPEG", "PNG", "WEBP", "TIFF") else 1
                return (img.height, img.width, self.channels or _MODE_CHANNELS.get(img.mode, 3)), orientation
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
            what = "a JPEG whose header is cut short or corrupt" if is_jpeg else "not an image in a known format"
            raise self.error(f"sample {i}: {what}", ValueError, sample=i) from None


# --- constant ---------------------------------------------------------------------------

_CONSTANT_TYPES = tuple(t for t in _VALUE_TYPES if t != types.FLOAT64)
_INT64_RANGE = (-2 ** 63, 2 ** 63 - 1)
# A NaN converted to these integer types gives the bits x86's float-to-integer conversion gives, as in DALI's
# CPU build (the other integer types get 0): (the signed view of the type, its value there).
_NAN_BITS = {torch.int32: (torch.int32, -2 ** 31), torch.int64: (torch.int64, -2 ** 63),
             torch.uint64: (torch.int64, -2 ** 63)}


def _int64(v):
    """One `idata` value, as DALI's Python API stores it: a 64-bit integer, floats truncated."""
    if isinstance(v, (bool, int, np.bool_, np.integer)) or (isinstance(v, (float, np.floating)) and np.isfinite(v)):
        value = int(v)
        if _INT64_RANGE[0] <= value <= _INT64_RANGE[1]:
            return value
        raise ValueError(f"{value} does not fit in a 64-bit integer")
    raise TypeError("expected an int")


def _float(v):
    """One `fdata` value (bools and ints included, as DALI accepts them)."""
    if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
        return float(v)
    raise TypeError("expected a float")


def _values(convert, name):
    """A scalar or a list of values, as a list."""
    def convert_all(v):
        v = v.tolist() if isinstance(v, np.ndarray) else v
        return [convert(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return ArgType(name, convert_all)


@register("constant", devices=("cpu", "gpu"),
          args=[Arg("idata", _values(_int64, "int or list of int"), None,
                    "Contents of the constant that is produced (for integer types). `fdata` and `idata` are "
                    "mutually exclusive, and one of them is required."),
                Arg("fdata", _values(_float, "float or list of float"), None,
                    "Contents of the constant that is produced (for floating point types), stored as float32."),
                Arg("shape", INTS, None, "The desired shape of the output. If not set, the data is assumed to be 1D.",
                    check=lambda v: "dimensions must not be negative" if any(d < 0 for d in v) else None),
                Arg("dtype", DTYPE, None, "Output data type. If not set, the output is float if `fdata` is used "
                                          "and int32 if `idata` is used.", choices=_CONSTANT_TYPES),
                Arg("layout", LAYOUT, None, "Layout info. If set and not empty, the layout must match the "
                                            "dimensionality of the output.")])
class Constant(Operator):
    """Produces a batch of constant tensors: the same tensor for every sample.

    The data, a scalar or a flat list of values (`idata` for integers, `fdata` for floats), is reshaped to
    `shape`; a single value fills the whole shape. Values are converted to `dtype` with rounding (half away
    from zero) and saturation. `types.Constant(value, dtype, shape, layout)` builds this operator from a
    scalar, list or array."""

    def plan(self, inputs):
        a = self.spec.args
        if a["idata"] is not None and a["fdata"] is not None:
            raise self.error("'fdata' and 'idata' are mutually exclusive; give one of them", ValueError)
        if a["idata"] is None and a["fdata"] is None:
            raise self.error("either 'fdata' or 'idata' must be given", ValueError)
        is_float = a["fdata"] is not None
        data = a["fdata"] if is_float else a["idata"]
        self.shape = tuple(a["shape"]) if a["shape"] is not None else (len(data),)
        volume = int(np.prod(self.shape))
        if len(data) not in (volume, 1):
            raise self.error(f"{'fdata' if is_float else 'idata'} has {len(data)} values, which does not match "
                             f"shape {list(self.shape)} ({volume} elements); give {volume} values or a single one",
                             ValueError)
        self.layout = str(a["layout"] or "")
        if self.layout and len(self.layout) != len(self.shape):
            raise self.error(f"layout '{self.layout}' has {len(self.layout)} dimensions but the output shape "
                             f"{list(self.shape)} has {len(self.shape)}", ValueError)
        dtype = types.to_torch_type(a["dtype"] if a["dtype"] is not None else types.FLOAT if is_float else types.INT32)
        self.sample = _converted(data, is_float, dtype).expand(volume).reshape(self.shape)
        self.device = "cpu" if self.spec.device == "cpu" else "gpu"
        return [BatchSpec(self.device, dtype, len(self.shape), self.layout)], self.step

    def step(self, inputs, args, ctx):
        sample = self.sample if self.device == "cpu" else self.sample.to(ctx.cuda_device)
        batch = sample.expand((ctx.batch_size,) + self.shape).contiguous()
        return [TensorList.make(batch, self.layout, device=self.device)]


def _converted(values, is_float, dtype):
    """The `idata` (int64) or `fdata` (float32) values as a 1D tensor of `dtype`, converted as DALI does."""
    x = torch.tensor(values, dtype=torch.float32 if is_float else torch.int64).reshape(-1)
    if dtype == torch.bool or dtype.is_floating_point:
        return convert_saturate(x, dtype)
    if is_float:
        out = convert_saturate(x, dtype)
        if dtype in _NAN_BITS:
            view, bits = _NAN_BITS[dtype]
            out.view(view)[torch.isnan(x)] = bits
        return out
    info = torch.iinfo(dtype)
    return x.clamp(max(info.min, _INT64_RANGE[0]), min(info.max, _INT64_RANGE[1])).to(dtype)
