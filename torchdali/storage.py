"""Where readers get their bytes. Every reader opens, lists and reads files through these
functions only, so that one place decides how a path is reached: a local path with the
standard library (plain file I/O, nothing more), a URL (s3://, gs://, http(s)://, memory://,
any protocol fsspec knows) through fsspec, an optional dependency.

Remote reads are retried with exponential backoff on transient errors (connection errors,
timeouts, HTTP 408, 429 and 5xx), never on a missing file or a refused access; every error
names the URL. A protocol's options (endpoint, credentials) come from fsspec's configuration:
environment variables such as FSSPEC_S3_ENDPOINT_URL=http://host:9000, or
``fsspec.config.conf["s3"] = {...}``.

Settings, read at each call (assign them as ``torchdali.storage.read_ahead_bytes = ...``):
- ``cache_dir``: a local folder that keeps a whole copy of every remote file read, reused by
  later reads (the next epochs, other processes). None (the default): the folder named by the
  environment variable TORCHDALI_STORAGE_CACHE, no cache when it is unset. Copies are never
  checked against the remote file again: empty the folder when the remote data changes.
- ``read_ahead_bytes``: how many bytes `open_stream` fetches ahead of its reader (in up to 4
  concurrent ranged requests); 0: one 1 MiB request at a time, when the reader needs it.
- ``retries`` and ``backoff``: retries after the first attempt, and the wait in seconds
  before the first one (doubled for each next one).
- ``threads``: the threads that read remote files concurrently (`read_many`, read-ahead;
  read when a process first reads a URL).
"""
import collections
import concurrent.futures
import errno
import hashlib
import io
import os
import re
import sys
import threading
import time

CACHE_ENV = "TORCHDALI_STORAGE_CACHE"
cache_dir = None
read_ahead_bytes = 32 << 20
retries = 3
backoff = 0.25
threads = 16

_MIN_CHUNK = 1 << 20
_AHEAD_REQUESTS = 4
# Packages that fsspec needs for a protocol, where its own message does not say.
_PACKAGES = {"http": "aiohttp", "https": "aiohttp"}
# Client exceptions (module, class names) that mean a connection failed or timed out.
_TRANSIENT_CLIENT_ERRORS = [("asyncio", ("TimeoutError",)),  # not the built-in one before Python 3.11
                            ("aiohttp", ("ClientConnectionError", "ClientPayloadError")),
                            ("requests.exceptions", ("ConnectionError", "Timeout", "ChunkedEncodingError")),
                            ("botocore.exceptions", ("HTTPClientError",))]


def is_url(path):
    """Whether `path` names remote storage (scheme://...) rather than a local file."""
    return "://" in str(path)


def join(root, name):
    """`name` under `root` (a folder or URL prefix); `name` as it is when root is empty or
    `name` is a URL (or, under a local root, an absolute path)."""
    if not root or is_url(name):
        return name
    return root.rstrip("/") + "/" + name if is_url(root) else os.path.join(root, name)


def open_stream(path, read_ahead=None):
    """A binary file object reading `path` from its start, sequentially; for a URL, up to
    `read_ahead` bytes (`read_ahead_bytes` when None) are fetched ahead of the reader."""
    if not is_url(path):
        return open(path, "rb")
    cached = _cached_copy(path)
    if cached and os.path.exists(cached):
        return open(cached, "rb")
    fs, rpath = _filesystem(path)
    total = _size(path, fs, rpath)
    ahead = read_ahead_bytes if read_ahead is None else read_ahead
    return io.BufferedReader(_RemoteStream(path, fs, rpath, total, ahead, cached), _MIN_CHUNK)


def read_bytes(path, start=0, length=None):
    """`length` bytes of `path` from `start` (to its end when None)."""
    if is_url(path):
        return _read_url(path, start, length)
    with open(path, "rb") as f:
        f.seek(start)
        return f.read() if length is None else f.read(length)


def read_many(paths, ranges=None):
    """The bytes of each of `paths`, in order: the whole files, or the (start, length) of
    each in `ranges` (length None: to the end). URLs are read concurrently."""
    items = [(p, 0, None) for p in paths] if ranges is None else [(p, *r) for p, r in zip(paths, ranges)]
    if not any(is_url(p) for p in paths):
        return [read_bytes(*item) for item in items]
    return list(_pool().map(lambda item: read_bytes(*item), items))


def size(path):
    """The size of `path` in bytes."""
    if not is_url(path):
        return os.path.getsize(path)
    cached = _cached_copy(path)
    if cached and os.path.exists(cached):
        return os.path.getsize(cached)
    return _size(path, *_filesystem(path))


def list_files(root):
    """The files under folder `root`, recursively, as sorted paths relative to it (none when
    it does not exist). http(s) URLs cannot be listed (a server has no listing protocol)."""
    if is_url(root):
        return _list_url(root)
    out = []
    for folder, _, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        out += [name if rel == "." else os.path.join(rel, name) for name in names]
    return sorted(out)


# --- URLs ---
def _filesystem(url):
    """fsspec's filesystem for `url` and the path within it."""
    try:
        import fsspec
    except ImportError:
        raise ImportError(f"'{url}' is a URL: reading it needs fsspec (pip install fsspec, and the "
                          "package of its protocol: s3fs, gcsfs, aiohttp for http(s), ...)") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:
        package = _PACKAGES.get(url.split("://", 1)[0].split("::")[-1].lower())
        hint = f" (pip install {package})" if package else ""
        raise ImportError(f"cannot read '{url}': {e}{hint}") from None
    except ValueError as e:  # an unknown protocol
        raise ValueError(f"cannot read '{url}': {e}") from None


def _read_url(url, start, length):
    if length == 0:
        return b""
    cached = _cached_copy(url)
    if cached:
        if not os.path.exists(cached):
            _download(url, cached)
        return read_bytes(cached, start, length)
    fs, rpath = _filesystem(url)
    end = None if length is None else start + length
    data = _retrying(url, lambda: fs.cat_file(rpath, start=start or None, end=end))
    if length is not None and len(data) > length:  # the server sent the whole file (no Range)
        data = data[start:end]
    return data


def _size(url, fs, rpath):
    total = _retrying(url, lambda: fs.size(rpath))
    if total is None:
        raise OSError(errno.EIO, "the server does not tell the file's size", url)
    return total


def _list_url(root):
    fs, rpath = _filesystem(root)
    if "http" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        raise OSError(errno.EOPNOTSUPP, "an http(s) server cannot list a folder", root)
    prefix = rpath.rstrip("/") + "/"
    found = _retrying(root, lambda: fs.find(rpath))
    return sorted(p[len(prefix):] for p in found if p.startswith(prefix))


def _retrying(url, call):
    """call(), again after a growing pause while it fails with a transient error; any
    other error, or the last one, as an OSError naming `url`."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as e:
            if attempt > retries or not _transient(e):
                raise _named(url, e, attempt) from e
        time.sleep(backoff * 2 ** (attempt - 1))


def _causes(error):
    """`error` and the exceptions it was raised from (fsspec often re-raises)."""
    seen = []
    while error is not None and len(seen) < 8 and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _status(error):
    """The HTTP status an exception carries (aiohttp, requests, botocore, gcsfs), else None."""
    for attr in ("status", "status_code", "code"):
        value = getattr(error, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return getattr(response, "status_code", None)


def _transient(error):
    for e in _causes(error):
        status = _status(e)
        if status is not None:
            return status in (408, 429) or status >= 500
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        for module, names in _TRANSIENT_CLIENT_ERRORS:
            loaded = sys.modules.get(module)  # imported already if it raised this
            if loaded and isinstance(e, tuple(getattr(loaded, n) for n in names if hasattr(loaded, n))):
                return True
    return False


def _named(url, error, attempts):
    """The error to raise for `url`: FileNotFoundError, PermissionError or OSError, with
    the original failure as the reason (fsspec reports a failed connection as not found)."""
    causes = _causes(error)
    statuses = [s for s in map(_status, causes) if s is not None]
    if _transient(error):
        reason = next((e for e in causes if _status(e) is not None), causes[-1])
        return OSError(errno.EIO, f"{_describe(reason)} (attempts: {attempts})", url)
    if 404 in statuses or not statuses and isinstance(error, FileNotFoundError):
        return FileNotFoundError(errno.ENOENT, "not found", url)
    if 401 in statuses or 403 in statuses or not statuses and isinstance(error, PermissionError):
        return PermissionError(errno.EACCES, "access denied", url)
    return OSError(error.errno if isinstance(error, OSError) and error.errno else errno.EIO,
                   _describe(error), url)


def _describe(error):
    text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Truncated(ConnectionError):
    """A ranged read that returned fewer bytes than asked for (retried)."""


# --- the read-ahead stream ---
_pools = {}


def _pool():
    """The threads reading remote files, one pool per process (none survives a fork)."""
    pool = _pools.get(os.getpid())
    if pool is None:
        pool = _pools[os.getpid()] = concurrent.futures.ThreadPoolExecutor(threads, "torchdali-storage")
    return pool


class _RemoteStream(io.RawIOBase):
    """Reads a URL in ranged requests issued ahead of the reader, up to `ahead` bytes past
    the chunk it reads from (chunks on a fixed grid, so a seek refetches the same ones).
    With a cache copy to make, each chunk is also written at its offset into a temporary
    file, which becomes the copy once every chunk is in (a stream closed early leaves none)."""

    def __init__(self, url, fs, rpath, total, ahead, cached):
        self.url, self._fs, self._rpath, self._total = url, fs, rpath, total
        self._chunk = max(ahead // _AHEAD_REQUESTS, _MIN_CHUNK)
        self._depth = ahead // self._chunk
        self._pending = collections.deque()  # (offset, future of the bytes there), in order
        self._passed = []  # requests a seek went past, maybe still running
        self._next = 0  # where the next request starts
        self._buf, self._buf_at, self._pos = b"", 0, 0
        self._cached, self._tmp, self._fd = cached, None, None
        if cached:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            self._tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}.{id(self)}.part"
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._written, self._lock = set(), threading.Lock()

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._total}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b):
        if self._pos >= self._total:
            return 0
        if not self._buf_at <= self._pos < self._buf_at + len(self._buf):
            self._take_chunk()
        start = self._pos - self._buf_at
        n = min(len(b), len(self._buf) - start)
        b[:n] = memoryview(self._buf)[start:start + n]
        self._pos += n
        return n

    def _take_chunk(self):
        """The chunk holding the position becomes the buffer, and requests are issued to
        keep the read-ahead full. A position outside the requested chunks restarts them there."""
        while self._pending and (self._pending[0][0] + self._chunk <= self._pos or self._pending[0][0] > self._pos):
            self._pass(self._pending.popleft()[1])
        if not self._pending:
            self._next = self._pos - self._pos % self._chunk
        self._request(self._depth + 1)
        self._buf_at, future = self._pending.popleft()
        self._buf = future.result()
        self._request(self._depth)

    def _pass(self, future):
        if not future.cancel():
            self._passed = [f for f in self._passed if not f.done()] + [future]

    def _request(self, depth):
        while len(self._pending) < depth and self._next < self._total:
            end = min(self._next + self._chunk, self._total)
            self._pending.append((self._next, _pool().submit(self._fetch, self._next, end)))
            self._next = end

    def _fetch(self, start, end):
        data = _retrying(self.url, lambda: self._ranged(start, end))
        if self._fd is not None:
            os.pwrite(self._fd, data, start)
            with self._lock:
                self._written.add(start)
                if len(self._written) == -(-self._total // self._chunk):
                    os.replace(self._tmp, self._cached)
                    self._tmp = None
        return data

    def _ranged(self, start, end):
        data = self._fs.cat_file(self._rpath, start=start, end=end)
        if len(data) == self._total and end - start < self._total:  # the server ignored Range
            data = data[start:end]
        if len(data) != end - start:
            raise _Truncated(f"got {len(data)} bytes of {start}..{end}")
        return data

    def close(self):
        """Cancels the requests not started and waits for the others (they may be writing
        the cache file), then drops an unfinished copy."""
        if not self.closed:
            futures = [f for _, f in self._pending] + self._passed
            self._pending.clear()
            for f in futures:
                f.cancel()
            concurrent.futures.wait(futures)
            if self._fd is not None:
                os.close(self._fd)
                if self._tmp:
                    os.unlink(self._tmp)
        super().close()


# --- the cache ---
def _cache_root():
    return cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV) or None


def _cached_copy(url):
    """Where the cache keeps `url`'s copy (None without a cache): its hash and base name."""
    root = _cache_root()
    if not root:
        return None
    digest = hashlib.sha256(url.encode()).hexdigest()[:24]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[-64:]
    return os.path.join(root, f"{digest}-{base}")


def _download(url, target):
    """A whole copy of `url` at `target`, written under a temporary name first so that
    concurrent readers (threads, processes) never see a partial copy."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = f"{target}.{os.getpid()}.{threading.get_ident()}.part"
    fs, rpath = _filesystem(url)
    try:
        _retrying(url, lambda: fs.get_file(rpath, tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
