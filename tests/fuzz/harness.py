"""The parent side of the fuzz suite: a long-lived worker process that runs cases one by one.

A case crosses a pipe to ``python -m tests.fuzz.worker`` (length-prefixed pickles) and the
reply says, per kernel path, how the run ended.  The parent tells a crash (the worker died:
signal or exit code), a hang (no reply within ``timeout`` seconds: the worker is killed) and
the worker's own verdicts apart; the worker is started again for the next case.  The worker
runs with an address-space limit (``RLIMIT_AS``, 6 GiB by default) so that an unbounded
allocation ends in MemoryError instead of taking the machine.

A failing case is written to ``GRAPHRT_FUZZ_OUT`` (default: a ``graphrt-fuzz`` folder in the
temporary directory) as a pickle and, for models, an ``.onnx`` file; ``python -m
tests.fuzz.replay FILE`` runs it again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RLIMIT_AS = int(os.environ.get("GRAPHRT_FUZZ_RLIMIT_AS", str(6 << 30)))
#: Seconds one case may take (every kernel path together) before it counts as a hang.
CASE_TIMEOUT = float(os.environ.get("GRAPHRT_FUZZ_TIMEOUT", "10"))
#: The session memory budget when a case sets none (graphrt's default ``max_memory``).
DEFAULT_BUDGET = 2 << 30
#: How far a case's peak resident size may rise over the worker's size before it, in units of
#: the session's memory budget (the budget itself, the copy of the outputs handed back, numpy
#: temporaries), plus a fixed allowance; past it the case is reported as a huge allocation.
RSS_FACTOR = float(os.environ.get("GRAPHRT_FUZZ_RSS_FACTOR", "2.5"))
RSS_SLACK = 512 << 20
_HEADER = struct.Struct("<Q")


@dataclasses.dataclass
class Case:
    """One model (or one native call) and how to run it."""

    label: str
    model: bytes = b""
    feeds: dict[str, Any] | None = None  # None: the worker makes inputs from the model
    paths: tuple[str, ...] = ("numpy",)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    cancel_after: float | None = None  # seconds, then the run's CancellationToken fires
    twice: bool = False  # run again on the warm plan and pooled state
    seed: int = 0
    call: tuple[str, Any] | None = None  # ("module:function", argument) instead of a model

    def digest(self) -> str:
        return hashlib.sha1(pickle.dumps((self.label, self.model, self.call))).hexdigest()[:12]


@dataclasses.dataclass
class Finding:
    """What went wrong with a case: a crash, a hang, or a verdict the worker returned."""

    label: str
    what: str  # "crash", "hang", "raw:<Exception>", "memory", "inputs-modified", ...
    detail: str
    path: str | None = None  # kernel path
    saved: str | None = None  # where the case was written

    @property
    def fatal(self) -> bool:
        """Slow cases are reported, not failed: the hang limit is the harness's timeout."""
        return self.what != "slow"

    def signature(self) -> tuple[str, str, str | None]:
        return (self.label, self.what, self.path)

    def __str__(self) -> str:
        where = f" [{self.path}]" if self.path else ""
        saved = f"\n  replay: python -m tests.fuzz.replay {self.saved}" if self.saved else ""
        return f"{self.label}{where}: {self.what}: {self.detail}{saved}"


class Worker:
    """One worker process at a time, started on demand and again after a crash or hang."""

    def __init__(self, rlimit_as: int = RLIMIT_AS, timeout: float = CASE_TIMEOUT) -> None:
        self.rlimit_as = rlimit_as
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.cases = 0
        self.restarts = 0
        self.last_reply: dict[str, Any] | None = None
        self._pending: tuple[Case, float] | None = None
        self._stderr = tempfile.TemporaryFile()

    def start(self) -> None:
        env = dict(
            os.environ,
            GRAPHRT_FUZZ_RLIMIT_AS=str(self.rlimit_as),
            GRAPHRT_FUZZ_TIMEOUT=str(self.timeout),
        )
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        self._stderr.seek(0)
        self._stderr.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        reply = self._receive(timeout=300)
        if not isinstance(reply, dict) or not reply.get("ready"):
            self.close()
            raise RuntimeError(f"the fuzz worker did not start: {reply!r}\n{self.stderr_tail()}")

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # this worker only, by its own handle
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None

    def dispose(self) -> None:
        """Stop the worker and drop its stderr file (the end of a test session or run)."""
        self.close()
        self._stderr.close()

    def stderr_tail(self, size: int = 3000) -> str:
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        end = self._stderr.tell()
        self._stderr.seek(max(0, end - size))
        return self._stderr.read().decode(errors="replace")

    def _receive(self, timeout: float) -> Any:
        """The next reply; "HANG" after ``timeout`` seconds, "EOF" when the worker died."""
        out = self.proc.stdout
        ready, _, _ = select.select([out], [], [], timeout)
        if not ready:
            return "HANG"
        head = out.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return "EOF"
        (size,) = _HEADER.unpack(head)
        body = out.read(size)
        if len(body) < size:
            return "EOF"
        return pickle.loads(body)

    def submit(self, case: Case) -> None:
        """Send a case without waiting: the caller draws the next one meanwhile."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.close()
            self.start()
            self.restarts += 1
        data = pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL)
        self.cases += 1
        self._pending = (case, time.monotonic())
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker died: result() reports how

    def result(self) -> tuple[dict[str, Any] | None, Finding | None]:
        """The submitted case's reply, or the crash or hang it caused."""
        case, start = self._pending
        self._pending = None
        try:
            reply = self._receive(max(self.timeout - (time.monotonic() - start), 0.0))
        except (BrokenPipeError, OSError):
            reply = "EOF"
        elapsed = time.monotonic() - start
        self.last_reply = reply if isinstance(reply, dict) else None
        if reply == "HANG":
            tail = self.stderr_tail()
            self.close()
            return None, Finding(case.label, "hang", f"no result after {elapsed:.0f} s\n{tail}")
        if reply == "EOF":
            code = self.proc.wait()
            tail = self.stderr_tail()
            self.close()
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            return None, Finding(case.label, "crash", f"worker died ({how})\n{tail}")
        return reply, None

    def run(self, case: Case) -> tuple[dict[str, Any] | None, Finding | None]:
        """The worker's reply for this case, or the crash or hang it caused."""
        self.submit(case)
        return self.result()


def verdicts(case: Case, reply: dict[str, Any]) -> list[Finding]:
    """Every rule a worker's reply breaks: only results and SessionErrors are acceptable."""
    found = []
    for path, r in reply["paths"].items():
        outcome = r["outcome"]
        if outcome.startswith("raw:"):
            what = "memory" if outcome == "raw:MemoryError" else outcome
            found.append(Finding(case.label, what, r.get("detail", ""), path))
        if r.get("inputs_modified"):
            found.append(Finding(case.label, "inputs-modified", str(r["inputs_modified"]), path))
        budget = case.options.get("max_memory", DEFAULT_BUDGET)
        grown = r.get("peak_rss", 0) - r.get("base_rss", 0)
        if grown > RSS_FACTOR * budget + RSS_SLACK:
            found.append(
                Finding(
                    case.label,
                    "huge-allocation",
                    f"peak RSS grew {grown >> 20} MiB (session budget {budget >> 20} MiB)",
                    path,
                )
            )
        if r.get("elapsed", 0.0) > CASE_TIMEOUT / 2 and outcome != "SessionError:cancelled":
            found.append(Finding(case.label, "slow", f"{r['elapsed']:.1f} s", path))
    return found


def output_dir() -> Path:
    out = Path(os.environ.get("GRAPHRT_FUZZ_OUT") or Path(tempfile.gettempdir()) / "graphrt-fuzz")
    out.mkdir(parents=True, exist_ok=True)
    return out


def save(case: Case, finding: Finding) -> str:
    """Write the case beside its finding; the path to replay it."""
    out = output_dir()
    safe = "".join(c if c.isalnum() else "_" for c in case.label)[:60]
    stem = out / f"{safe}-{finding.what.replace(':', '_')}-{case.digest()}"
    with open(f"{stem}.pkl", "wb") as f:
        pickle.dump(case, f, protocol=pickle.HIGHEST_PROTOCOL)
    if case.model:
        Path(f"{stem}.onnx").write_bytes(case.model)
    Path(f"{stem}.txt").write_text(str(finding) + "\n")
    return f"{stem}.pkl"


def settle(worker: Worker, case: Case, reply: Any, failure: Finding | None) -> list[Finding]:
    """Every finding of a finished case, each saved for replay."""
    found = [failure] if failure is not None else verdicts(case, reply)
    if reply is not None and reply.get("restart"):
        worker.close()  # memory it kept after a huge case: a fresh worker for the next one
    for f in found:
        f.saved = save(case, f)
    return found


def check(worker: Worker, case: Case) -> list[Finding]:
    """Run one case; every finding, each saved for replay."""
    reply, failure = worker.run(case)
    return settle(worker, case, reply, failure)


class Pipeline:
    """One case in flight while the next is drawn: hypothesis's generation in this process
    overlaps the worker's run (two cores, not one).  ``add`` returns the previous case's
    findings, ``flush`` the last one's."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.pending: Case | None = None
        self.replies: list[dict[str, Any]] = []

    def _finish(self) -> list[Finding]:
        if self.pending is None:
            return []
        case, self.pending = self.pending, None
        reply, failure = self.worker.result()
        if reply is not None:
            self.replies.append(reply)
        return settle(self.worker, case, reply, failure)

    def add(self, case: Case) -> list[Finding]:
        found = self._finish()
        self.worker.submit(case)
        self.pending = case
        return found

    def flush(self) -> list[Finding]:
        return self._finish()
