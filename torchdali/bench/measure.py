"""Timing a system as a training loop consumes it, with its peak memory and a progress line.

Host memory is the proportional set size (PSS) of this process and of its child processes
(the DataLoader's workers), so pages that forked workers share are counted once; GPU
memory is the device's memory in use (cudaMemGetInfo), which sees every allocator (torch's,
DALI's, nvJPEG's). Both are sampled by a thread and reported as the peak above the level
just before the system was opened. PSS costs the kernel ~10 ms a read for a process of
torch's size, so host memory is read every 0.5 s, GPU memory every 0.05 s.

CPU use over the timed epochs is counted twice: the cores the system kept busy (CPU time of
the process and its children, over the wall time) and how busy the whole host was
(/proc/stat), which in a job of several ranks includes every rank."""
import os
import statistics
import sys
import threading
import time
import traceback

import torch

MIB = 1 << 20


def _process_tree(read):
    """The sum of `read(pid)` over this process and its descendants."""
    pids, total = [os.getpid()], 0
    while pids:
        pid = pids.pop()
        try:
            total += read(pid)
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # a child (or one of its threads) ended while we looked
    return total


def _pss(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))


def host_memory():
    """Bytes of PSS of this process and its descendants, or None where /proc has no
    smaps_rollup (not Linux)."""
    if not os.path.exists("/proc/self/smaps_rollup"):
        return None
    return _process_tree(_pss)


def _cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, all threads


class CpuClock:
    """CPU time of this process tree and of the whole host, between start() and stop()."""

    def __init__(self):
        self.linux = os.path.exists("/proc/stat")

    @staticmethod
    def _host():
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # busy (all but idle and iowait), all

    def start(self):
        self.wall = time.perf_counter()
        if self.linux:
            self.tree, self.host = _process_tree(_cpu_ticks), self._host()
        return self

    def stop(self):
        """{'cpu_cores_used': cores the process tree kept busy on average, 'host_cpu_busy':
        the fraction of the host's CPU time that was busy}; None where /proc is missing."""
        if not self.linux:
            return {"cpu_cores_used": None, "host_cpu_busy": None}
        wall = time.perf_counter() - self.wall
        tree = (_process_tree(_cpu_ticks) - self.tree) / os.sysconf("SC_CLK_TCK")
        busy, total = (now - then for now, then in zip(self._host(), self.host))
        return {"cpu_cores_used": round(tree / wall, 2), "host_cpu_busy": round(busy / max(total, 1), 3)}


def gpu_memory():
    """Bytes in use on the current CUDA device, by every process and allocator."""
    free, total = torch.cuda.mem_get_info()
    return total - free


class MemoryPeaks:
    """Samples host (and GPU) memory between start() and stop()."""

    def __init__(self, gpu, interval=0.05, host_every=10):
        self.gpu, self.interval, self.host_every = gpu, interval, host_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="bench-memory")

    def start(self):
        self.host_start = host_memory()
        self.gpu_start = gpu_memory() if self.gpu else None
        self.host_peak, self.gpu_peak = self.host_start, self.gpu_start
        self._thread.start()
        return self

    def _sample(self):
        tick = 0
        while not self._stop.wait(self.interval):
            tick += 1
            self._take(host=tick % self.host_every == 0)

    def _take(self, host=True):
        if host and self.host_start is not None:
            self.host_peak = max(self.host_peak, host_memory())
        if self.gpu:
            self.gpu_peak = max(self.gpu_peak, gpu_memory())

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._take()
        above = lambda peak, start: None if start is None else round((peak - start) / MIB, 1)  # noqa: E731
        return {"host_mib": above(self.host_peak, self.host_start),
                "host_start_mib": None if self.host_start is None else round(self.host_start / MIB, 1),
                "gpu_mib": above(self.gpu_peak, self.gpu_start)}


class Progress:
    """One status line on stderr: redrawn in place on a terminal, a line per epoch in a log;
    nothing when `quiet` (the ranks of a job other than the first)."""

    def __init__(self, stream=None, quiet=False):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.quiet = quiet

    def update(self, what, epoch, epochs, done, total, images, seconds, end=False):
        if self.quiet or not (self.live or end):
            return  # a log gets the epoch's line only: nothing to build per batch
        name = "warm-up" if epoch == 0 else f"epoch {epoch}/{epochs}"
        frac = done / max(total, 1)
        bar = "#" * int(frac * 20) + "-" * (20 - int(frac * 20))
        line = f"{what}: {name} [{bar}] {done}/{total} batches, {images / max(seconds, 1e-9):,.0f} images/s"
        if self.live:
            self.stream.write(f"\r\033[K{line}" + ("\n" if end and epoch == epochs else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def run_system(system, stage, data, settings, progress, ranks):
    """Open `system` for `stage`, run a warm-up epoch and `settings['epochs']` timed ones over
    this rank's shard; returns the row: median images/s over the timed epochs, each epoch's
    rate, images and seconds, memory peaks and CPU use, or the error that stopped it (the
    other systems still run). Every rank starts each epoch together (`ranks.barrier`), also
    one whose system failed, so that the others go on."""
    row = {"system": system.id, "label": system.label, "path": system.path}
    reason = system.unavailable(ranks)
    if reason:
        return {**row, "error": f"not run: {reason}"}
    gpu = system.path == "gpu"
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # memory cached by the systems before is not this one's
        torch.cuda.reset_peak_memory_stats()
    peaks = MemoryPeaks(gpu).start()
    what = f"{stage} | {system.label}"
    epochs = settings["epochs"] + 1
    synced = 0
    try:
        start = time.perf_counter()
        system.open(stage, data["path"], settings, ranks)
        row["setup_s"] = round(time.perf_counter() - start, 2)
        counts, times = [], []
        for epoch in range(epochs):
            ranks.barrier()
            synced += 1
            if epoch == 1:
                cpu = CpuClock().start()
            expected = ranks.epoch_size(data["images"], epoch)
            batches = -(-expected // settings["batch_size"])
            images, start = 0, time.perf_counter()
            for done, (batch, _labels) in enumerate(system.epoch(), 1):
                images += batch.shape[0]
                progress.update(what, epoch, settings["epochs"], done, batches, images, time.perf_counter() - start)
            if gpu:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            progress.update(what, epoch, settings["epochs"], batches, batches, images, seconds, end=True)
            if images != expected:
                raise RuntimeError(f"an epoch gave {images} images, its shard has {expected}")
            if epoch:
                counts.append(images)
                times.append(seconds)
        row.update(cpu.stop())
        row["images_per_s"] = round(statistics.median(c / t for c, t in zip(counts, times)), 1)
        row["epoch_images_per_s"] = [round(c / t, 1) for c, t in zip(counts, times)]
        row["epoch_images"], row["epoch_seconds"] = counts, [round(t, 4) for t in times]
        row["batch_shape"] = list(batch.shape)
    except Exception as e:  # noqa: BLE001 - a failing system is a row, not the end of the run
        lines = str(e).strip().splitlines()
        row["error"] = type(e).__name__ + (f": {lines[0]}" if lines else "")
        row["traceback"] = traceback.format_exc(limit=-8)
    finally:
        system.close()
        for _ in range(synced, epochs):
            ranks.barrier()
        row.update(peaks.stop())
        if gpu:
            row["gpu_torch_peak_mib"] = round(torch.cuda.max_memory_allocated() / MIB, 1)
            row["gpu_torch_reserved_peak_mib"] = round(torch.cuda.max_memory_reserved() / MIB, 1)
    return row
