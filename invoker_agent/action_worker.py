"""A warm worker: one Python action behind OpenWhisk's action runtime protocol on a Unix socket.

Started by :class:`invoker_agent.workers.ProcessWorker` inside the worker's sandbox as
``python action_worker.py --socket S --ready-file F`` (stdlib only, so nothing but the action's own
imports loads before ``/init``; the agent has already set ``CUDA_VISIBLE_DEVICES`` in this process's
environment and pinned its CPUs). It listens on the Unix socket ``S`` (the sandbox has no network of the
host's; the agent reaches the socket through the directory it shares with the sandbox), creates ``F``
once it listens, and serves, one request at a time:

- ``POST /init`` ``{"value": {"name", "main", "binary", "code", "env"}}`` → 200 ``{"ok": true,
  "esg_batch": bool}``; 403 if already initialised; 502 ``{"error": ...}`` naming the import error.
- ``POST /run`` ``{"value": ..., "namespace", "action_name", "action_version", "activation_id",
  "transaction_id", "deadline"}`` → 200 with the action's dict; 502 ``{"error": ...}`` if it raised or
  did not return a dict.

**Lifeline.** ``ESG_LIFELINE_FD`` names a pipe whose other end only the agent holds: when that end closes
(the agent stopped the worker, or died) this process exits. It is what ends a sandbox whose outer
``bwrap`` died before the sandbox's own parent-death signal was set (:mod:`invoker_agent.sandbox`).

**Batch entry point.** If the action module defines ``<main>_batch`` (``main_batch`` for the default
``main``) taking a list of argument dicts and returning a list of result dicts of the same length, a
batch is one ``/run`` whose value is ``{"__esg_batch__": [args, ...]}``; the reply is
``{"__esg_batch__": [result, ...]}``. Without it the parent sends one ``/run`` per request.

**Logs.** What the action prints goes to this process's stdout and stderr (the agent's log file), each
line as OpenWhisk's log store formats a container's line (``DockerToActivationLogStore``'s
``LogLine.toFormattedString``): the time it was written (RFC 3339, nanoseconds, as Docker's JSON log
stamps it), padded to 30 characters, the stream and the text: ``2024-06-10T08:23:41.502123456Z stdout:
hello``. After each activation an unstamped sentinel line goes to both streams, as OpenWhisk's runtimes
print it, for the agent to cut the log at.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import io
import json
import os
import socketserver
import sys
import tempfile
import threading
import time
import types
import zipfile
from http.server import BaseHTTPRequestHandler

BATCH_KEY = "__esg_batch__"
SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
RUN_ENV = {"namespace": "__OW_NAMESPACE", "action_name": "__OW_ACTION_NAME",
           "action_version": "__OW_ACTION_VERSION", "activation_id": "__OW_ACTIVATION_ID",
           "transaction_id": "__OW_TRANSACTION_ID", "deadline": "__OW_DEADLINE", "api_key": "__OW_API_KEY"}


def log_line(stream: str, text: str, time_ns: int) -> str:
    """One line of an activation's ``logs`` as OpenWhisk shows it (``f"$time%-30s $stream: $log"``)."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"
    return f"{stamp:<30} {stream}: {text}"


class StampedStream(io.TextIOBase):
    """A text stream writing each complete line to ``raw`` as :func:`log_line` formats it."""

    def __init__(self, raw, name: str) -> None:
        super().__init__()
        self.raw = raw
        self.stream = name
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            now = time.time_ns()
            self.raw.write("".join(log_line(self.stream, line, now) + "\n" for line in lines))
            self.raw.flush()
        return len(text)

    def end_line(self) -> None:
        """A line still unfinished at the end of an activation, written as it is."""
        if self._partial:
            self.write("\n")

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()


class Action:
    main = None
    batch = None


def load(value: dict) -> None:
    """Import the action's code (source text or a base64 zip with __main__.py)."""
    for k, v in (value.get("env") or {}).items():
        os.environ[str(k)] = v if isinstance(v, str) else json.dumps(v)
    entry = value.get("main") or "main"
    code = value.get("code") or ""
    if value.get("binary"):
        root = tempfile.mkdtemp(prefix="esg-action-")
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(code))) as z:
            z.extractall(root)
        main_py = os.path.join(root, "__main__.py")
        if not os.path.exists(main_py):
            raise ImportError("the zip action has no __main__.py")
        sys.path.insert(0, root)
        spec = importlib.util.spec_from_file_location("__action__", main_py)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = types.ModuleType("__action__")
        module.__file__ = "__action__.py"
        exec(compile(code, "__action__.py", "exec"), module.__dict__)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise AttributeError(f"action entry point {entry!r} is not a function")
    Action.main = fn
    batch = getattr(module, f"{entry}_batch", None)
    Action.batch = batch if callable(batch) else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1          # headers and body leave in one write (no Nagle/delayed-ACK stall)
    _date: tuple[int, str] = (-1, "")

    def log_message(self, fmt, *args):  # keep the action's log clean
        pass

    def date_time_string(self, timestamp=None):
        """The ``Date`` header, formatted once a second (not at every reply: 8 us each, with the email
        package's date formatting)."""
        if timestamp is not None:
            return super().date_time_string(timestamp)
        now = int(time.time())
        if Handler._date[0] != now:
            Handler._date = (now, super().date_time_string(now))
        return Handler._date[1]

    def reply(self, status: int, body: dict) -> None:
        self.send(status, json.dumps(body).encode())

    def send(self, status: int, data: bytes) -> None:
        """The reply, with the headers it needs and no ``Server`` header: the agent's client parses each
        header with the email package (about 13 us a header)."""
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 (http.server's naming)
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, RecursionError):
            return self.reply(400, {"error": "request body is not JSON"})
        if self.path == "/init":
            return self.init(body)
        if self.path == "/run":
            return self.run(body)
        return self.reply(404, {"error": f"no such endpoint {self.path}"})

    def init(self, body: dict) -> None:
        if Action.main is not None:
            return self.reply(403, {"error": "Cannot initialize the action more than once."})
        try:
            load(body.get("value") or {})
        except BaseException as e:  # noqa: BLE001 - any failure of user code is the developer's error
            return self.reply(502, {"error": f"Initialization has failed due to: {type(e).__name__}: {e}"})
        return self.reply(200, {"ok": True, "esg_batch": Action.batch is not None})

    def run(self, body: dict) -> None:
        if Action.main is None:
            return self.reply(502, {"error": "Cannot run the action: it was not initialized."})
        for k, env in RUN_ENV.items():
            if k in body:
                v = str(body[k])
                if os.environ.get(env) != v:        # putenv only for what changed since the last /run
                    os.environ[env] = v
        value = body.get("value")
        try:
            if isinstance(value, dict) and BATCH_KEY in value:
                if Action.batch is None:
                    return self.reply(400, {"error": "The action defines no batch entry point."})
                args = value[BATCH_KEY]
                results = Action.batch(args)
                if not isinstance(results, list) or len(results) != len(args):
                    return self.reply(502, {"error": "The batch entry point must return a list with one "
                                                     f"result per request ({len(args)})."})
                out = {BATCH_KEY: results}
            else:
                out = Action.main(value if value is not None else {})
                if not isinstance(out, dict):
                    return self.reply(502, {"error": "The action did not return a dictionary."})
            data = json.dumps(out)
        except BaseException as e:  # noqa: BLE001
            return self.reply(502, {"error": f"An exception occurred: {type(e).__name__}: {e}"})
        finally:       # one write each (under ``-u``, print writes the line and its end separately)
            for stream, raw in ((sys.stdout, sys.__stdout__), (sys.stderr, sys.__stderr__)):
                if isinstance(stream, StampedStream):
                    stream.end_line()
                raw.write(SENTINEL + "\n")
                raw.flush()
        self.send(200, data.encode())


class Server(socketserver.UnixStreamServer):
    """``http.server``'s handler on a Unix socket (one connection at a time, as the agent uses it)."""


def watch_lifeline() -> None:
    """Exit when the agent's end of the lifeline (``ESG_LIFELINE_FD``) closes; nothing without one."""
    named = os.environ.pop("ESG_LIFELINE_FD", "")
    if not named.isdigit():
        return
    fd = int(named)

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os._exit(0)
    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def main() -> None:
    watch_lifeline()
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True, help="the Unix socket to listen on")
    ap.add_argument("--ready-file", required=True, help="created once the socket listens")
    args = ap.parse_args()
    sys.stdout = StampedStream(sys.__stdout__, "stdout")
    sys.stderr = StampedStream(sys.__stderr__, "stderr")
    server = Server(args.socket, Handler)
    with open(args.ready_file, "w"):
        pass
    server.serve_forever()


if __name__ == "__main__":
    main()
