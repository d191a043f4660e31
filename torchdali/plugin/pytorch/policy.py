"""`LastBatchPolicy`: what an iterator does with an epoch's last, incomplete batch."""
from enum import Enum, unique


@unique
class LastBatchPolicy(Enum):
    """What to do when the epoch's samples do not fill the last batch.

    * FILL: return a whole batch, completed by the reader (its last sample repeated when
      the reader pads, `pad_last_batch=True`, else the next epoch's first samples).
    * DROP: do not return the incomplete batch.
    * PARTIAL: return only the epoch's samples (a shorter batch)."""

    FILL = 0
    DROP = 1
    PARTIAL = 2
