"""The `@augmentation` decorator."""
from ._augmentation import Augmentation


def augmentation(function=None, *, mag_range=None, randomly_negate=None, mag_to_param=None, param_device=None,
                 name=None, augmentation_cls=None):
    """Make `function(data, parameter, **kwargs)`, written with pipeline operators, an
    `Augmentation` that automatic augmentations can use: called with `magnitude_bin` and
    `num_magnitude_bins` instead of the parameter, it passes
    `mag_to_param(magnitudes[magnitude_bin] * (-1) ** random_sign)`, where
    `magnitudes = linspace(mag_range[0], mag_range[1], num_magnitude_bins)` (or `mag_range`
    itself when it is an np.ndarray; without `mag_range` the parameter is None).

    randomly_negate: negate the magnitude for a random half of the samples.
    mag_to_param: magnitude -> parameter, NumPy only (the parameters of all bins are
    computed once, into a constant); the identity by default.
    param_device: where that constant lives: "cpu" (default), "gpu" or "auto" (the data's device).
    name: the augmentation's name (the function's by default)."""

    def decorator(function):
        return (augmentation_cls or Augmentation)(function, mag_range=mag_range, mag_to_param=mag_to_param,
                                                  randomly_negate=randomly_negate, param_device=param_device,
                                                  name=name)

    if function is None:
        return decorator
    if not callable(function):
        raise TypeError(f"The `@augmentation` decorator was used to decorate the object that is not callable: "
                        f"{function}.")
    if isinstance(function, Augmentation):
        raise TypeError(f"The `@augmentation` was applied to already decorated Augmentation. Please call "
                        f"`{function.name}.augmentation` method to modify the augmentation setup or apply the "
                        f"decorator to the underlying `{function.name}.op` directly.\n"
                        f"Error in augmentation: {function}.")
    return decorator(function)
