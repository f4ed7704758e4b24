"""A small JSON HTTP endpoint on node-rank 0 that the operator polls for TrainingJob status:
``GET /`` (or ``/progress``) → {"step", "totalSteps", "loss", "tokensPerSecond", "lastCheckpoint",
...}; ``GET /healthz`` → ok."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from phalanx_runtime.failure_report import write_message


class Progress:
    def __init__(self, total_steps: int, world_size: int, job: str = ""):
        self._lock = threading.Lock()
        self._state = {"job": job, "phase": "Starting", "step": 0, "totalSteps": total_steps, "loss": None,
                       "tokensPerSecond": None, "mfu": None, "stepTimeSeconds": None, "lastCheckpoint": None,
                       "worldSize": world_size, "startTime": time.time(), "updatedAt": time.time()}

    def update(self, **kw) -> None:
        with self._lock:
            self._state.update(kw)
            self._state["updatedAt"] = time.time()

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self._state)


def write_final(progress: Progress, path: str | None) -> bool:
    """The final snapshot as the container's termination message (Kubernetes keeps up to 4 KiB of
    it in the pod status), so the job status shows the last step even after the endpoint is gone.
    A failing rank's error report there (failure_report) stays: it says why the pod failed."""
    if not path:
        return False
    data = json.dumps({k: v for k, v in progress.snapshot().items() if k not in ("job", "startTime")}).encode()
    return write_message(data, path, keep=lambda report, _rank: report)


class ProgressServer:
    def __init__(self, progress: Progress, port: int, host: str = "0.0.0.0"):
        progress_ref = progress

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.rstrip("/") in ("", "/progress"):
                    body, code = json.dumps(progress_ref.snapshot()).encode(), 200
                elif self.path == "/healthz":
                    body, code = b'{"ok": true}', 200
                else:
                    body, code = b'{"error": "not found"}', 404
                # Status line, headers and body in ONE send. Sent apart (end_headers() flushes the
                # headers), the body waits for this thread to get the GIL back from the training
                # and checkpoint threads, and a client that reads once sees headers only.
                head = (f"HTTP/1.0 {code} {self.responses[code][0]}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
                self.wfile.write(head.encode() + body)

            def log_message(self, *args):  # quiet
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="phalanx-progress", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
