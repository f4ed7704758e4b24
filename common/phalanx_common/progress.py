"""Rank 0's progress record (keys: contract.ProgressKey), the small JSON HTTP endpoint on node-rank
0 that the operator polls for TrainingJob status — ``GET /`` (or ``/progress``) → {"step",
"totalSteps", "loss", "tokensPerSecond", "lastCheckpoint", ...}; ``GET /healthz`` → ok — and the
final record as the container's termination message. One implementation for the built-in runtime,
the reporting client (phalanx_common.report) and the log collectors (phalanx_common.collect).

JSON out allows NaN: a diverged run's loss is sent as ``NaN``, which the operator's strict parser
accepts for ``loss`` alone (condition LossNotFinite)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from phalanx_common.contract import ProgressKey
from phalanx_common.termination import write_message

# A termination message is cut at 4 KiB by the kubelet (a cut JSON parses as nothing): the final
# record sheds its metrics, then all of them, to stay under this.
MAX_FINAL_BYTES = 3584
_NOT_FINAL = ("job", ProgressKey.START_TIME)


class Progress:
    def __init__(self, total_steps: int | None, world_size: int | None, job: str = ""):
        self._lock = threading.Lock()
        now = time.time()
        self._state = {"job": job, ProgressKey.PHASE: "Starting", ProgressKey.STEP: 0,
                       ProgressKey.TOTAL_STEPS: total_steps, ProgressKey.LOSS: None,
                       ProgressKey.TOKENS_PER_SECOND: None, ProgressKey.MFU: None,
                       ProgressKey.STEP_TIME_SECONDS: None, ProgressKey.LAST_CHECKPOINT: None,
                       ProgressKey.WORLD_SIZE: world_size, ProgressKey.START_TIME: now,
                       ProgressKey.UPDATED_AT: now}

    def update(self, **kw) -> None:
        with self._lock:
            self._state.update(kw)
            self._state[ProgressKey.UPDATED_AT] = time.time()

    def snapshot(self) -> dict:
        with self._lock:
            return {str(key): value for key, value in self._state.items()}


def encode_final(snapshot: dict) -> bytes:
    """The record as JSON of at most MAX_FINAL_BYTES: metrics are dropped, last first, until it
    fits, then the metrics key altogether."""
    record = {k: v for k, v in snapshot.items() if k not in _NOT_FINAL}
    metrics = dict(record.get(ProgressKey.METRICS) or {})
    while True:
        data = json.dumps(record, allow_nan=True).encode()
        if len(data) <= MAX_FINAL_BYTES or ProgressKey.METRICS not in record:
            return data
        if metrics:
            metrics.pop(next(reversed(metrics)))
            record[ProgressKey.METRICS] = dict(metrics)
        else:
            del record[ProgressKey.METRICS]


def write_final(progress: Progress, path: str | None) -> bool:
    """The final snapshot as the container's termination message (Kubernetes keeps up to 4 KiB of
    it in the pod status), so the job status shows the last step even after the endpoint is gone.
    A failing rank's error report there (failure_report) stays: it says why the pod failed."""
    if not path:
        return False
    return write_message(encode_final(progress.snapshot()), path, keep=lambda report, _rank: report)


class ProgressServer:
    def __init__(self, progress: Progress, port: int, host: str = "0.0.0.0"):
        progress_ref = progress

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.rstrip("/") in ("", "/progress"):
                    body, code = json.dumps(progress_ref.snapshot(), allow_nan=True).encode(), 200
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
