"""torchdali.storage over real servers: a local HTTP server with Range requests (http.server
in a thread; needs aiohttp, fsspec's HTTP client), fsspec's memory:// filesystem (listing),
and an S3 server (moto's, when moto[server] and s3fs are installed). Ranged reads, streams
with a bounded read-ahead, retries with backoff on 503s, errors naming the URL, the local
cache, and readers.file over URLs giving the samples it gives over the local folder."""
import errno
import http.server
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
import uuid

import numpy as np
import pytest

from torchdali import storage
from torchdali.tools import serve
from torchdali.operators.base import Args, RunContext

from conftest import make_reader

fsspec = pytest.importorskip("fsspec", reason="URLs are read through fsspec")
MiB = 1 << 20


class FlakyHandler(serve.RangeHandler):
    """The files under server.root with HEAD, GET and single Range requests (serve's handler);
    the next server.failures requests get 503, paths under /forbidden/ 403. Logs the requests."""

    def serve(self, send_body):
        server = self.server
        with server.lock:
            server.requests.append((self.command, self.path, self.headers.get("Range")))
            failing = server.failures > 0
            server.failures -= failing
        if failing:
            return self.reply(503, b"busy", send_body)
        if urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).startswith("/forbidden/"):
            return self.reply(403, b"forbidden", send_body)
        return super().serve(send_body)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A threaded HTTP server over a temporary folder: (server, its base URL)."""
    pytest.importorskip("aiohttp", reason="fsspec reads http(s) URLs with aiohttp")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    httpd.root, httpd.lock = os.path.realpath(tmp_path_factory.mktemp("www")), threading.Lock()
    httpd.requests, httpd.failures = [], 0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join()


@pytest.fixture
def web(server, monkeypatch):
    """The server with a fresh request log, and a helper that puts bytes at a URL."""
    httpd, base = server
    httpd.requests.clear()
    httpd.failures = 0
    monkeypatch.setattr(storage, "backoff", 0.01)

    def put(name, data):
        os.makedirs(os.path.dirname(os.path.join(httpd.root, name)), exist_ok=True)
        with open(os.path.join(httpd.root, name), "wb") as f:
            f.write(data)
        return f"{base}/{name}"
    return httpd, base, put


@pytest.fixture
def memory():
    """A fresh memory:// folder: (its URL, the filesystem, the folder's path in it)."""
    fs = fsspec.filesystem("memory")
    root = f"/td-{uuid.uuid4().hex}"
    yield f"memory:/{root}", fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def no_cache(monkeypatch):
    monkeypatch.delenv(storage.CACHE_ENV, raising=False)
    monkeypatch.setattr(storage, "cache_dir", None)


def random_bytes(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def read_in_pieces(stream, piece):
    out = bytearray()
    while True:
        got = stream.read(piece)
        if not got:
            return bytes(out)
        out += got


# --- paths ---
def test_local_paths_and_joining(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"0123456789")
    (tmp_path / "y.bin").write_bytes(b"")
    path = str(tmp_path / "a" / "x.bin")
    assert not storage.is_url(path) and storage.is_url("s3://b/k") and storage.is_url("memory://x")
    assert storage.read_bytes(path, 3, 4) == b"3456" and storage.read_bytes(path, 7) == b"789"
    assert storage.size(path) == 10 and storage.open_stream(path).read() == b"0123456789"
    assert storage.list_files(str(tmp_path)) == ["a/x.bin", "y.bin"]
    assert storage.read_many([path, str(tmp_path / "y.bin")]) == [b"0123456789", b""]
    assert storage.read_many([path, path], [(2, 3), (8, None)]) == [b"234", b"89"]
    assert storage.join("s3://b/data/", "c/1.jpg") == "s3://b/data/c/1.jpg"
    assert storage.join("/data", "c/1.jpg") == os.path.join("/data", "c/1.jpg")
    assert storage.join("/data", "/abs/1.jpg") == "/abs/1.jpg"
    assert storage.join("/data", "gs://b/1.jpg") == storage.join("s3://b", "gs://b/1.jpg") == "gs://b/1.jpg"
    assert storage.join("", "c/1.jpg") == "c/1.jpg"


# --- http: ranged reads, streams, errors, retries ---
@pytest.mark.parametrize("start,length", [(0, None), (0, 1), (12345, 777), (99_999, None), (3, 0), (50_000, 10 ** 9)])
def test_http_ranged_reads(web, no_cache, start, length):
    httpd, _, put = web
    data = random_bytes(100_003)
    url = put("ranges/r.bin", data)
    end = None if length is None else start + length
    assert storage.read_bytes(url, start, length) == data[start:end]
    assert storage.size(url) == len(data)
    gets = [r for r in httpd.requests if r[0] == "GET"]
    assert len(gets) <= 1 and all(r[1] == "/ranges/r.bin" for r in gets)
    assert storage.read_many([url, url]) == [data, data]
    assert storage.read_many([url, url], [(start, length), (7, 3)]) == [data[start:end], data[7:10]]


@pytest.mark.parametrize("read_ahead,piece", [(0, 100_003), (2 * MiB, 65_537), (32 * MiB, 1 << 22)])
def test_http_stream_reads_every_byte_once(web, no_cache, read_ahead, piece):
    httpd, _, put = web
    data = random_bytes(3 * MiB + 12_345, seed=read_ahead)
    url = put(f"stream/{read_ahead}.bin", data)
    with storage.open_stream(url, read_ahead=read_ahead) as stream:
        assert read_in_pieces(stream, piece) == data
    ranges = sorted(tuple(map(int, re.findall(r"\d+", r[2]))) for r in httpd.requests if r[0] == "GET")
    chunk = max(read_ahead // 4, MiB)
    assert ranges == [(s, min(s + chunk, len(data)) - 1) for s in range(0, len(data), chunk)]


@pytest.mark.parametrize("read_ahead,most", [(0, 1), (2 * MiB, 3), (4 * MiB, 5)])
def test_http_stream_read_ahead_is_bounded(web, no_cache, read_ahead, most):
    httpd, _, put = web
    url = put("bounded.bin", random_bytes(9 * MiB + 7))
    def gets():
        return len([r for r in httpd.requests if r[0] == "GET"])
    with storage.open_stream(url, read_ahead=read_ahead) as stream:
        assert len(stream.read(10)) == 10
        deadline = time.monotonic() + 10
        while gets() < most and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert gets() == most  # the chunk read and read_ahead's worth (1 MiB chunks here)


def test_http_stream_seeks(web, no_cache):
    _, _, put = web
    data = random_bytes(5 * MiB + 3, seed=7)
    url = put("seek.bin", data)
    with storage.open_stream(url, read_ahead=2 * MiB) as stream:
        assert stream.read(100) == data[:100]
        for offset, n in [(4 * MiB - 5, 10), (17, 3 * MiB), (len(data) - 2, 10), (MiB, 1)]:
            stream.seek(offset)
            assert stream.tell() == offset and stream.read(n) == data[offset:offset + n]
        assert stream.read() == data[MiB + 1:]


def test_http_404_and_403_name_the_url_without_retrying(web, no_cache):
    httpd, base, put = web
    url = f"{base}/missing/file.bin"
    for call in (lambda: storage.read_bytes(url), lambda: storage.read_bytes(url, 5, 5),
                 lambda: storage.size(url), lambda: storage.open_stream(url)):
        httpd.requests.clear()
        with pytest.raises(FileNotFoundError, match=re.escape(url)) as e:
            call()
        assert e.value.filename == url and e.value.errno == errno.ENOENT
        assert len(httpd.requests) <= 2  # HEAD then GET for the size; no retries
    put("forbidden/x.bin", b"x")
    httpd.requests.clear()
    with pytest.raises(PermissionError, match=re.escape(f"{base}/forbidden/x.bin")):
        storage.read_bytes(f"{base}/forbidden/x.bin")
    assert len(httpd.requests) == 1


def test_http_cannot_list(web, no_cache):
    _, base, put = web
    put("listme/a.bin", b"a")
    with pytest.raises(OSError, match="cannot list") as e:
        storage.list_files(f"{base}/listme")
    assert e.value.errno == errno.EOPNOTSUPP and e.value.filename == f"{base}/listme"


@pytest.mark.parametrize("failures", [1, 3])
def test_http_retries_503_with_exponential_backoff(web, no_cache, monkeypatch, failures):
    httpd, _, put = web
    data = random_bytes(2 * MiB + 1, seed=failures)
    url = put(f"flaky{failures}.bin", data)
    monkeypatch.setattr(storage, "backoff", 0.05)
    httpd.failures = failures
    began = time.perf_counter()
    assert storage.read_bytes(url, 10, 1000) == data[10:1010]
    assert time.perf_counter() - began >= 0.05 * (2 ** failures - 1)  # 0.05, 0.1, 0.2 s
    assert len(httpd.requests) == failures + 1
    httpd.failures = failures
    assert storage.size(url) == len(data)  # HEAD and GET per attempt
    with storage.open_stream(url, read_ahead=MiB) as stream:
        httpd.requests.clear()
        httpd.failures = failures  # the chunk requests fail (the size was asked at opening)
        assert stream.read() == data
    assert len([r for r in httpd.requests if r[0] == "GET"]) == failures + 3


def test_http_gives_up_after_the_retries(web, no_cache, monkeypatch):
    httpd, _, put = web
    url = put("down.bin", b"down")
    monkeypatch.setattr(storage, "retries", 2)
    httpd.failures = 100
    with pytest.raises(OSError, match=r"503.*attempts: 3") as e:
        storage.read_bytes(url)
    assert e.value.filename == url and not isinstance(e.value, FileNotFoundError)
    assert len(httpd.requests) == 3


def test_connection_refused_is_retried_and_names_the_url(no_cache, monkeypatch):
    pytest.importorskip("aiohttp", reason="fsspec reads http(s) URLs with aiohttp")
    monkeypatch.setattr(storage, "backoff", 0.01)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/x.bin"  # nothing listens there
    for call in (lambda: storage.read_bytes(url), lambda: storage.size(url)):
        with pytest.raises(OSError, match="attempts: 4") as e:
            call()
        assert e.value.filename == url and not isinstance(e.value, FileNotFoundError)


# --- the cache ---
def cache_files(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_cache_keeps_copies_of_ranged_reads(web, tmp_path, monkeypatch):
    httpd, _, put = web
    monkeypatch.setattr(storage, "cache_dir", None)
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    data = random_bytes(300_001, seed=3)
    url = put("cached/ranged.bin", data)
    assert storage.read_bytes(url, 1000, 99) == data[1000:1099]
    assert len(httpd.requests) == 1 and httpd.requests[0][2] is None  # the whole file, once
    httpd.requests.clear()
    assert storage.read_bytes(url, 5) == data[5:] and storage.size(url) == len(data)
    assert storage.open_stream(url).read() == data and storage.read_many([url]) == [data]
    assert httpd.requests == []
    [copy] = cache_files(tmp_path / "cache")
    assert copy.endswith("-ranged.bin")
    monkeypatch.setattr(storage, "cache_dir", str(tmp_path / "other"))  # the setting wins
    assert storage.read_bytes(url, 0, 3) == data[:3] and len(httpd.requests) == 1
    assert len(cache_files(tmp_path / "other")) == 1


def test_cache_fills_while_streaming(web, tmp_path, monkeypatch):
    httpd, _, put = web
    monkeypatch.setattr(storage, "cache_dir", str(tmp_path / "cache"))
    data = random_bytes(4 * MiB + 99, seed=4)
    url = put("cached/stream.bin", data)
    with storage.open_stream(url, read_ahead=2 * MiB) as stream:  # closed early: no copy
        assert stream.read(MiB + 5) == data[:MiB + 5]
    assert cache_files(tmp_path / "cache") == []
    with storage.open_stream(url, read_ahead=2 * MiB) as stream:
        stream.seek(10)  # within the first chunk: still sequential
        assert read_in_pieces(stream, 300_007) == data[10:]
    assert len(cache_files(tmp_path / "cache")) == 1
    httpd.requests.clear()
    assert storage.open_stream(url).read() == data and storage.read_bytes(url, 7, 7) == data[7:14]
    assert httpd.requests == []
    url2 = put("cached/skips.bin", data)
    with storage.open_stream(url2, read_ahead=0) as stream:  # chunks never fetched: no copy
        stream.read(10)
        stream.seek(-10, os.SEEK_END)
        assert stream.read() == data[-10:]
    assert len(cache_files(tmp_path / "cache")) == 1
    url3 = put("cached/seeks.bin", data)
    with storage.open_stream(url3, read_ahead=MiB) as stream:  # a seek back refetches chunks
        stream.read(2 * MiB)
        stream.seek(3)
        assert stream.read() == data[3:]
    [copy] = [name for name in cache_files(tmp_path / "cache") if name.endswith("seeks.bin")]
    assert (tmp_path / "cache" / copy).read_bytes() == data and len(cache_files(tmp_path / "cache")) == 2


# --- memory://: listing ---
def test_memory_listing_and_reads(memory, no_cache):
    url, fs, root = memory
    names = ["b/2.bin", "a/1.bin", "a/sub/3.bin", "top.bin"]
    for i, name in enumerate(names):
        fs.pipe(f"{root}/{name}", random_bytes(1000 + i, seed=i))
    assert storage.list_files(url) == sorted(names)
    assert storage.list_files(url + "/a/") == ["1.bin", "sub/3.bin"]
    assert storage.list_files(url + "/nothing") == []
    target = storage.join(url, "a/sub/3.bin")
    data = random_bytes(1002, seed=2)
    assert storage.read_bytes(target, 10, 20) == data[10:30] and storage.size(target) == 1002
    assert storage.open_stream(target).read() == data
    with pytest.raises(FileNotFoundError, match=re.escape(url + "/a/none.bin")):
        storage.read_bytes(url + "/a/none.bin")


def test_missing_fsspec_or_protocol_names_the_url(monkeypatch, no_cache):
    with pytest.raises(ValueError, match="nosuchproto://bucket/x"):
        storage.read_bytes("nosuchproto://bucket/x")
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if fsspec were not installed
    with pytest.raises(ImportError, match=r"s3://bucket/x.*pip install fsspec"):
        storage.size("s3://bucket/x")
    assert storage.is_url("s3://bucket/x")  # local paths never import fsspec


# --- readers.file over URLs ---
def make_file_reader(batch_size, **kwargs):
    return make_reader("readers.file", batch_size, 99, **kwargs)


def samples(batch_size=5, iterations=7, **kwargs):
    """(source_info, label, contents) of `iterations` batches, and the reader's meta."""
    op = make_file_reader(batch_size, **kwargs)
    out = []
    for i in range(iterations):
        data, labels = op.run([], Args(op, {}), RunContext(iteration=i, batch_size=batch_size, thread_pool=None))
        out += [(data.source_info[j], int(labels.as_torch_list()[j][0]), bytes(data.as_torch_list()[j].numpy()))
                for j in range(batch_size)]
    return out, op.meta()


@pytest.fixture
def image_tree(tmp_path):
    """A class-per-folder tree (odd sizes, an extra depth and filtered names) and its files."""
    layout = {"dog": ["b.jpg", "a.JPG", "c.png", "notes.txt"], "cat": ["2.jpg", "10.jpeg", "1.jpg"],
              "zebra": ["z.webp", "deep/x.jpg"]}
    files = {}
    for k, (cls, names) in enumerate(sorted(layout.items())):
        for i, name in enumerate(names):
            files[f"{cls}/{name}"] = random_bytes(50 + 37 * i + k, seed=10 * k + i)
    for name, data in files.items():
        os.makedirs(os.path.dirname(tmp_path / "tree" / name), exist_ok=True)
        (tmp_path / "tree" / name).write_bytes(data)
    return str(tmp_path / "tree"), files


@pytest.mark.parametrize("options", [{}, {"random_shuffle": True, "initial_fill": 4},
                                     {"num_shards": 3, "shard_id": 1, "pad_last_batch": True},
                                     {"file_filters": ["*.jpg"], "dir_filters": ["[cd]*"]}])
def test_reader_file_root_over_memory_equals_local(image_tree, memory, no_cache, options):
    local, files = image_tree
    url, fs, root = memory
    for name, data in files.items():
        fs.pipe(f"{root}/{name}", data)
    expected, meta = samples(file_root=local, **options)
    assert samples(file_root=url, **options) == (expected, meta)
    assert samples(file_root=url + "/", lazy_init=True, **options) == (expected, meta)


@pytest.mark.parametrize("options", [{}, {"random_shuffle": True, "initial_fill": 3},
                                     {"num_shards": 3, "shard_id": 2, "pad_last_batch": True}])
def test_reader_files_and_file_list_over_http_equal_local(image_tree, web, no_cache, options):
    local, files = image_tree
    httpd, base, put = web
    for name, data in files.items():
        put(f"data/{name}", data)
    names = sorted(files)[::-1]
    expected = samples(file_root=local, files=names, **options)
    assert samples(file_root=f"{base}/data", files=names, **options) == expected
    absolute = samples(files=[f"{base}/data/{n}" for n in names], **options)
    assert [(s[1], s[2]) for s in absolute[0]] == [(s[1], s[2]) for s in expected[0]]
    put("data/list.txt", "".join(f"{n} {i * 3}\n" for i, n in enumerate(names)).encode())
    with open(os.path.join(local, "list.txt"), "w") as f:
        f.write("".join(f"{n} {i * 3}\n" for i, n in enumerate(names)))
    assert samples(file_list=f"{base}/data/list.txt", **options) == \
        samples(file_list=os.path.join(local, "list.txt"), **options)
    assert any(r[1] == "/data/dog/b.jpg" for r in httpd.requests)


def test_reader_errors_over_http(web, no_cache):
    _, base, put = web
    put("errs/cat/1.jpg", b"1")
    with pytest.raises(ValueError, match=r"readers\.file.*cannot list file_root.*name the files with files or file_list"):
        make_file_reader(2, file_root=f"{base}/errs")
    with pytest.raises(ValueError, match=re.escape(f"cannot open file_list '{base}/errs/list.txt': not found")):
        make_file_reader(2, file_list=f"{base}/errs/list.txt")
    op = make_file_reader(2, file_root=f"{base}/errs", files=["cat/1.jpg", "cat/2.jpg"])
    with pytest.raises(RuntimeError, match=re.escape(f"cannot read '{base}/errs/cat/2.jpg': not found")):
        op.run([], Args(op, {}), RunContext(iteration=0, batch_size=2, thread_pool=None))


# --- S3 (moto's server) ---
@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("s3fs", reason="s3:// URLs need s3fs (pip install s3fs)")
    moto_server = pytest.importorskip("moto.server", reason="the S3 test server is moto's (pip install 'moto[server]')")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch, no_cache):
    """A fresh bucket on the S3 server, with fsspec configured to reach it: (URL, fs, bucket)."""
    monkeypatch.setitem(fsspec.config.conf, "s3", dict(s3_server))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    fs = fsspec.filesystem("s3", **s3_server)
    bucket = f"td-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    return f"s3://{bucket}", fs, bucket


def test_s3_reads_streams_and_lists(s3):
    url, fs, bucket = s3
    data = random_bytes(2 * MiB + 333, seed=5)
    fs.pipe(f"{bucket}/shards/s-000.bin", data)
    fs.pipe(f"{bucket}/shards/sub/s-001.bin", b"x")
    assert storage.list_files(url + "/shards") == ["s-000.bin", "sub/s-001.bin"]
    target = storage.join(url, "shards/s-000.bin")
    assert storage.size(target) == len(data) and storage.read_bytes(target, 777, 12345) == data[777:13122]
    with storage.open_stream(target, read_ahead=2 * MiB) as stream:
        assert read_in_pieces(stream, 99_999) == data
    with pytest.raises(FileNotFoundError, match=re.escape(url + "/shards/none.bin")):
        storage.read_bytes(url + "/shards/none.bin")


def test_s3_reader_file_root_equals_local(image_tree, s3):
    local, files = image_tree
    url, fs, bucket = s3
    for name, data in files.items():
        fs.pipe(f"{bucket}/train/{name}", data)
    options = {"num_shards": 2, "shard_id": 1, "random_shuffle": True, "initial_fill": 3}
    assert samples(file_root=url + "/train", **options) == samples(file_root=local, **options)
