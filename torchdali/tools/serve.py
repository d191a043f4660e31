"""serve: a local HTTP server for a folder, with Range requests (which fsspec's http client
uses for ranged reads and Python's `http.server` does not answer), for demos, benchmarks and
tests of reading over http://. Not for production.

    python -m torchdali.tools.serve FOLDER [--port 8000]
"""
import argparse
import contextlib
import http.server
import os
import re
import threading
import urllib.parse


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """HEAD and GET of the files under server.root, whole or one 'bytes=a-b' range."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each reply's tail waits for a delayed ACK (40 ms)

    def do_HEAD(self):
        """Answer a HEAD request: the headers of a GET, no body."""
        self.serve(send_body=False)

    def do_GET(self):
        """Answer a GET request: the file, or the range the Range header asks for."""
        self.serve(send_body=True)

    def serve(self, send_body):
        """Reply with the requested file or byte range (206), 404 outside the root, 416 past
        the end."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        local = os.path.realpath(os.path.join(self.server.root, path.lstrip("/")))
        if not local.startswith(self.server.root + os.sep) or not os.path.isfile(local):
            return self.reply(404, b"not found", send_body)
        size = os.path.getsize(local)
        ranged = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        start, end, headers = 0, size, {}
        if ranged and any(ranged.groups()):
            first, last = ranged.groups()
            start = int(first) if first else max(size - int(last), 0)
            end = min(int(last) + 1, size) if first and last else size
            if start >= size:
                return self.reply(416, b"", send_body, {"Content-Range": f"bytes */{size}"})
            headers = {"Content-Range": f"bytes {start}-{end - 1}/{size}"}
        with open(local, "rb") as f:
            f.seek(start)
            body = f.read(end - start) if send_body else b""
        self.reply(206 if headers else 200, body, send_body, headers, length=end - start)

    def reply(self, status, body, send_body, headers=(), length=None):
        """Send the status, `headers`, the length and, with `send_body`, the body."""
        self.send_response(status)
        for key, value in dict(headers).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, *args):
        """Silent: a request per sample would flood the terminal."""
        pass


@contextlib.contextmanager
def serving(root, port=0, host="127.0.0.1"):
    """Serve `root` from a thread while the block runs; yields its base URL (port 0: any free
    port)."""
    httpd = http.server.ThreadingHTTPServer((host, port), RangeHandler)
    httpd.root = os.path.realpath(root)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def main(argv=None):
    """The command line: serve FOLDER on --port until interrupted."""
    parser = argparse.ArgumentParser(prog="serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    with serving(args.folder, args.port, args.host) as url:
        print(f"serving {args.folder} at {url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
