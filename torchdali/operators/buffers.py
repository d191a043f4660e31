"""Host buffers recycled from batch to batch, for operators whose kernels write into a
buffer they are given."""
import torch


def _holders(buffer):
    """How many references hold `buffer`'s memory (tensors and views of it, the pool's own
    included)."""
    return torch._C._storage_Use_Count(buffer.untyped_storage()._cdata)


class RecycledBuffers:
    """1-D uint8 CPU buffers for an operator's output batches, handed out again once nothing
    but the pool holds them. A fresh batch-sized allocation is fresh pages from the kernel
    (glibc maps anything over 32 MiB anew and unmaps it when freed), and touching them the
    first time costs as much as a good part of a decode. A batch that outgrows every free
    buffer gets a new one, with headroom for the next batches' varying sizes."""

    def __init__(self, keep=4, headroom=1.25):
        self.keep = keep
        self.headroom = headroom
        self.buffers = []  # (buffer, its holders when only the pool holds it)

    def take(self, nbytes):
        """A 1-D uint8 tensor of `nbytes`, at the start of a buffer nobody else holds."""
        free = [(b, own) for b, own in self.buffers if _holders(b) == own]
        fits = [b for b, _ in free if b.numel() >= nbytes]
        if fits:
            return min(fits, key=torch.Tensor.numel)[:nbytes]
        buffer = torch.empty(int(nbytes * self.headroom), dtype=torch.uint8)
        if len(self.buffers) >= self.keep and free:  # make room: the smallest free one goes
            smallest = min(free, key=lambda f: f[0].numel())[0]
            self.buffers = [(b, own) for b, own in self.buffers if b is not smallest]
        if len(self.buffers) < self.keep:
            self.buffers.append((buffer, _holders(buffer)))
        return buffer[:nbytes]
