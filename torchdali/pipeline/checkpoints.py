"""The checkpoint format: a pipeline's operator states and, when an iterator drives the
pipeline, the iterator's own state, as versioned JSON text."""
import json

import numpy as np

FORMAT = "torchdali-checkpoint"
VERSION = 1


def encode(operator_states, iterator_data=None):
    """The checkpoint text of these states."""
    return json.dumps({"format": FORMAT, "version": VERSION, "operators": operator_states,
                       "iterator_data": iterator_data}, default=_json_default)


def decode(text):
    """The checkpoint's data (a dict with "operators" and "iterator_data"); a ValueError
    for text that is not a checkpoint of this version."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint: not a torchdali checkpoint ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("checkpoint: not a torchdali checkpoint")
    if data.get("version") != VERSION:
        raise ValueError(f"checkpoint: version {data.get('version')} is not supported")
    return data


def _json_default(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not serializable in a checkpoint")
