"""`Augmentation`: a transformation written with pipeline operators plus the range of its
magnitudes, so that automatic augmentations can pick a strength per sample by a bin
number. The parameters of all bins are computed once, when the graph is defined, and
kept as one constant table; a sample's parameter is a lookup in it."""
import warnings

import numpy as np

from ... import fn, types
from ...conditionals.transform import call as _converted
from ...graph import DataNode, _definition
from ._args import MissingArgException, accepted_kwargs, missing_kwargs, num_positional_args


class _Unset:
    """An argument of `Augmentation.augmentation()` that was not given (None is a value there)."""


class _SignedMagnitudeBin:
    """A magnitude bin with the sign of the magnitude, drawn once before a split between
    augmentations: the signed index 2 * bin + sign picks from the table of signed
    magnitudes [m0, -m0, m1, -m1, ...]."""

    def __init__(self, magnitude_bin, random_sign, signed_magnitude_idx):
        self._magnitude_bin = magnitude_bin
        self._random_sign = random_sign
        self._signed_magnitude_idx = signed_magnitude_idx

    def __getitem__(self, idx):
        """The signed bin of step `idx` of a sequence of augmentations (bins and signs drawn
        with a shape)."""
        magnitude_bin = self._magnitude_bin if isinstance(self._magnitude_bin, int) else self._magnitude_bin[idx]
        return type(self)(magnitude_bin, self._random_sign[idx], self._signed_magnitude_idx[idx])

    @classmethod
    def create_from_bin(cls, magnitude_bin, random_sign=None, seed=None, shape=None):
        if not isinstance(magnitude_bin, (int, DataNode)):
            raise TypeError(f"The `magnitude_bin` must be an int or DataNode (output of an operator or "
                            f"`types.Constant`) representing a batch of ints from "
                            f"`[0..num_magnitude_bins-1]` range. Got {magnitude_bin} instead.")
        if random_sign is not None and (seed is not None or shape is not None):
            raise ValueError("The `random_sign` cannot be specified together with neither `seed` nor `shape`.")
        if random_sign is None:
            random_sign = fn.random.uniform(values=[0, 1], dtype=types.INT32, seed=seed, shape=shape)
        # Computed here, where the bin is defined (maybe outside any per-sample `if`), not in a branch.
        return cls(magnitude_bin, random_sign, 2 * magnitude_bin + random_sign)

    @property
    def bin(self):
        return self._magnitude_bin

    @property
    def random_sign(self):
        return self._random_sign

    @property
    def signed_magnitude_idx(self):
        return self._signed_magnitude_idx


def signed_bin(magnitude_bin, random_sign=None, seed=None, shape=None):
    """`magnitude_bin` (an int or a batch of ints) with a sign per sample: `random_sign`
    (a batch of 0 or 1, 1 negating the magnitude) or, if not given, one drawn uniformly
    (`seed`, `shape` for a sequence of augmentations). Draw it before splitting the batch
    between augmentations, so that the sign is drawn once for the whole batch."""
    return _SignedMagnitudeBin.create_from_bin(magnitude_bin, random_sign, seed, shape)


def _signed_magnitudes(magnitudes):
    """The table indexed by 2 * bin + sign: each magnitude, then its negation."""
    return np.array([-m if sign else m for m in magnitudes for sign in (0, 1)])


def _contains_data_node(obj):
    if isinstance(obj, (tuple, list)):
        return any(_contains_data_node(x) for x in obj)
    return isinstance(obj, DataNode)


def _traced(op):
    """`op` with its per-sample `if`s converted while a conditional pipeline is defined: the
    augmentations are called from torchdali's code, which the conversion skips."""
    definition = _definition()
    return _converted(op) if definition is not None and definition.conditions is not None else op


class Augmentation:
    """A transformation `op(data, parameter, **kwargs)` with its magnitudes: use the
    `@augmentation` decorator to make one. Called with `magnitude_bin` and
    `num_magnitude_bins`, it runs `op` with `mag_to_param(magnitudes[bin] * (-1) ** sign)`,
    where `magnitudes = linspace(*mag_range, num_magnitude_bins)` (or `mag_range` itself
    when it is an array)."""

    def __init__(self, op, mag_range=None, randomly_negate=None, mag_to_param=None, param_device=None, name=None):
        self._op = op
        self._mag_range = mag_range
        self._randomly_negate = randomly_negate
        self._mag_to_param = mag_to_param
        self._param_device = param_device
        self._name = name
        if num_positional_args(op) <= 1:
            raise TypeError(f"The {op} accepts {num_positional_args(op)} positional argument(s), but the functions "
                            f"decorated with `@augmentation` must accept at least two positional arguments: the "
                            f"samples and parameters.\nError in: {self}.")

    def __repr__(self):
        params = [f"{k}={v!r}" for k, v in self._get_config().items() if v is not None]
        return f"Augmentation({', '.join([repr(self.op)] + params)})"

    def __call__(self, data, *, magnitude_bin=None, num_magnitude_bins=None, **kwargs):
        """`op(data, param, **the kwargs op takes)`, param chosen by `magnitude_bin` (an int,
        a batch of ints or a `signed_bin`) out of `num_magnitude_bins`."""
        param = self._get_param(magnitude_bin, num_magnitude_bins, self._infer_param_device(data))
        missing = missing_kwargs(self.op, kwargs, 2)
        if missing:
            raise MissingArgException(
                f"The augmentation `{self.name}` requires following named argument(s) which were not provided "
                f"to the call: {', '.join(missing)}. Please make sure to pass the required arguments when "
                f"calling the augmentation.", augmentation=self, missing_args=missing)
        return _traced(self.op)(data, param, **accepted_kwargs(self.op, kwargs, 2))

    @property
    def op(self):
        """The transformation, `op(data, parameter, **kwargs)`."""
        return self._op

    @property
    def mag_range(self):
        """(lo, hi) of the magnitudes the bins span, or the array of magnitudes, or None."""
        return self._mag_range

    @property
    def mag_to_param(self):
        """What turns a magnitude into `op`'s parameter (np.array when not given)."""
        return self._mag_to_param or np.array

    @property
    def randomly_negate(self):
        """Whether a magnitude is negated for the samples a signed bin marks."""
        return self._randomly_negate or False

    @property
    def param_device(self):
        """Where the parameter is computed: "cpu", "gpu" or "auto" (the data's device)."""
        return self._param_device or "cpu"

    @property
    def name(self):
        """The augmentation's name, by default its op's function name."""
        return self._name or self.op.__name__

    def augmentation(self, mag_range=_Unset, randomly_negate=_Unset, mag_to_param=_Unset, param_device=_Unset,
                     name=_Unset, augmentation_cls=None):
        """A new augmentation of the same `op` with the given settings changed (the others kept)."""
        config = self._get_config()
        for key, value in dict(mag_range=mag_range, randomly_negate=randomly_negate, mag_to_param=mag_to_param,
                               param_device=param_device, name=name).items():
            if value is not _Unset:
                config[key] = value
        return (augmentation_cls or type(self))(self.op, **config)

    def _get_config(self):
        return {"mag_range": self._mag_range, "mag_to_param": self._mag_to_param,
                "randomly_negate": self._randomly_negate, "param_device": self._param_device, "name": self._name}

    def _infer_param_device(self, data):
        return self.param_device if self.param_device != "auto" else (getattr(data, "device", None) or "cpu")

    def _map_mag_to_param(self, magnitude):
        param = self.mag_to_param(magnitude)
        if _contains_data_node(param):
            raise TypeError(
                f"The `mag_to_param` callback of `{self.name}` augmentation returned a DataNode (an output of a "
                f"pipeline operator), which is not supported there: it must return an `np.ndarray` or data "
                f"directly convertible to one, so that the parameters of all magnitudes are computed once and "
                f"reused across iterations. Move the operators into the augmentation itself.\n\n"
                f"Error in augmentation: {self}.")
        return np.array(param)

    def _map_mags_to_params(self, magnitudes):
        params = [self._map_mag_to_param(m) for m in magnitudes]
        for param, mag in zip(params[1:], magnitudes[1:]):
            if param.shape != params[0].shape or param.dtype != params[0].dtype:
                raise ValueError(
                    f"The `mag_to_param` callback of `{self.name}` augmentation must return the arrays of the "
                    f"same type and shape for different magnitudes. Got param of shape {params[0].shape} and "
                    f"{params[0].dtype} type for magnitude {magnitudes[0]}, but for magnitude {mag} the "
                    f"returned array has shape {param.shape} and type {param.dtype}.\n\n"
                    f"Error in augmentation: {self}.")
        return np.array(params)

    def _get_magnitudes(self, num_magnitude_bins):
        mag_range = self.mag_range
        if mag_range is None:
            return None
        if isinstance(mag_range, np.ndarray):
            if num_magnitude_bins is not None and len(mag_range) != num_magnitude_bins:
                raise ValueError(f"The augmentation `{self.name}` has nd.array of length {len(mag_range)} specified "
                                 f"as the `mag_range`. However, the `num_magnitude_bins` passed to the call is "
                                 f"{num_magnitude_bins}.")
            return mag_range
        if num_magnitude_bins is None:
            raise ValueError(f"The `num_magnitude_bins` argument is missing in the call of the `{self.name}` "
                             f"augmentation. Please specify the `num_magnitude_bins` along with the samples and "
                             f"magnitude_bin.\nError in augmentation: {self}.")
        if not hasattr(mag_range, "__len__") or len(mag_range) != 2:
            raise ValueError(f"The `mag_range` must be a tuple of (low, high) ends of magnitude range or nd.array "
                             f"of explicitly defined magnitudes. Got `{mag_range}` for augmentation `{self.name}`.")
        return np.linspace(mag_range[0], mag_range[1], num_magnitude_bins, dtype=np.float32)

    def _get_param(self, magnitude_bin, num_magnitude_bins, param_device):
        """The parameter per sample (a DataNode), or None for augmentations without magnitudes."""
        magnitudes = self._get_magnitudes(num_magnitude_bins)
        if magnitudes is None:
            return None
        if magnitude_bin is None:
            raise ValueError(f"The augmentation `{self.name}` has `mag_range` specified, so when called, it "
                             f"requires `magnitude_bin` parameter to select the magnitude from the `mag_range`."
                             f"\nError in augmentation: {self}.")
        if not self.randomly_negate:
            # A signed bin may come from a suite where other augmentations negate: its bin is used.
            bin_idx = magnitude_bin.bin if isinstance(magnitude_bin, _SignedMagnitudeBin) else magnitude_bin
            if isinstance(bin_idx, int):
                return types.Constant(self._map_mag_to_param(magnitudes[bin_idx]), device=param_device)
            return types.Constant(self._map_mags_to_params(magnitudes), device=param_device)[bin_idx]
        if not isinstance(magnitude_bin, _SignedMagnitudeBin):
            magnitude_bin = signed_bin(magnitude_bin)
            warnings.warn(f"The augmentation `{self.name}` was declared with `random_negate=True`, but unsigned "
                          f"`magnitude_bin` was passed to the augmentation call. The augmentation will randomly "
                          f"negate the magnitudes manually. However, for better performance, if you conditionally "
                          f"split batch between multiple augmentations, it is better to call "
                          f"`signed_magnitude_bin = signed_bin(magnitude_bin)` before the split and pass the "
                          f"signed bins instead.", Warning)
        if isinstance(magnitude_bin.bin, int):  # a table of two: the bin's magnitude and its negation
            magnitudes, index = [magnitudes[magnitude_bin.bin]], magnitude_bin.random_sign
        else:
            index = magnitude_bin.signed_magnitude_idx
        params = self._map_mags_to_params(_signed_magnitudes(magnitudes))
        return types.Constant(params, device=param_device)[index]
