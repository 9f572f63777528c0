"""The grader's side of its worker processes: limits, the fork server, one worker's pipes.

:class:`Zygote` starts ``sandbox_worker.py`` (a fork server that imports torch once) and asks it
for a fresh confined worker per submission; :class:`WorkerProcess` is the grader's end of one
worker:
its socket (frames, see :mod:`protocol`), the pipe its output goes to, and its keeper's pipes
(the keeper reports the worker's PID, exit status and peak memory, and kills it on request).
Every read and write has a deadline, output is capped, and a worker that dies is explained
(:func:`describe_status`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coursekit.grading import protocol
from coursekit.grading.sandbox_worker import recv_json, send_json

WORKER = Path(__file__).with_name("sandbox_worker.py")


def clean(text: Any, limit: int = 500) -> str:
    """Text from a worker, made safe to show: one line, no control characters, bounded."""
    text = re.sub(r"[\x00-\x1f\x7f\x80-\x9f]+", " ", str(text)).strip()
    return text if len(text) <= limit else text[:limit] + "…"


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-submission limits. ``timeout`` bounds a whole submission, ``case_timeout`` each cell
    and case; the worker's CPU time is bounded by ``timeout`` too."""

    timeout: float = 60.0
    case_timeout: float = 10.0
    memory_mib: int = 2048
    output_kib: int = 1024
    file_mib: int = 16
    tmp_mib: int = 64
    processes: int = 1
    open_files: int = 64

    def worker(self) -> dict:
        return {"cpu_s": math.ceil(self.timeout), "memory_mib": self.memory_mib,
                "processes": self.processes, "file_mib": self.file_mib,
                "open_files": self.open_files, "tmp_mib": self.tmp_mib}

    def describe(self) -> str:
        return (f"{self.case_timeout:g} s per case, {self.timeout:g} s per submission (wall and "
                f"CPU), {self.memory_mib} MiB of memory, {self.processes} "
                f"process{'es' if self.processes > 1 else ''}, "
                f"{self.output_kib} KiB of output, files up to {self.file_mib} MiB")


class WorkerLost(Exception):
    """The worker died, overran or broke the protocol; ``reason`` completes 'the worker ...',
    ``kind`` is what the class summary flags: crash, timeout, output or protocol."""

    def __init__(self, reason: str, kind: str = "crash") -> None:
        super().__init__(reason)
        self.reason, self.kind = reason, kind


class HarnessError(Exception):
    """The grader could not do its part (a suite the grader cannot run remotely, ...)."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_status(status: int, limits: Limits) -> str:
    """What a worker's wait status means, completing 'the worker ...'."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {
            signal.SIGSEGV: "crashed with a segmentation fault (SIGSEGV)",
            signal.SIGXCPU: f"used up its CPU time ({math.ceil(limits.timeout)} s)",
            signal.SIGKILL: "was killed (SIGKILL): a resource limit, most likely memory",
            signal.SIGABRT: "aborted (SIGABRT)",
        }.get(sig, f"crashed ({_signal_name(sig)})")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == 71:
        return "refused to start: it could not drop root privileges"
    return f"exited with status {code} (os._exit, or a crash in native code)"


class Output:
    """What a submission's code printed: the first ``keep`` bytes are kept for the feedback."""

    def __init__(self, keep: int = 2048) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = b""
        self.worker_total = 0

    def add(self, chunk: bytes) -> None:
        self.worker_total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail = (self.tail + chunk)[-300:]

    def text(self) -> str:
        """The kept output, without terminal control sequences."""
        text = bytes(self.head).decode("utf-8", "replace")
        return re.sub(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]", "", text)

    def last_line(self) -> str:
        lines = [line for line in self.tail.decode("utf-8", "replace").splitlines()
                 if line.strip()]
        return clean(lines[-1], 200) if lines else ""


class WorkerProcess:
    """The grader's end of one sandboxed worker: its socket, output pipe and keeper pipes."""

    def __init__(self, fds: list[int], limits: Limits, output: Output,
                 stop_fd: int | None = None) -> None:
        self.stop_fd = stop_fd  # readable when the batch is interrupted: stop waiting at once
        self.sock = socket.socket(fileno=fds[0])
        self.sock.setblocking(False)
        self.info, self.kill_w, self.out = fds[1], fds[2], fds[3]
        os.set_blocking(self.info, False)
        os.set_blocking(self.out, False)
        self.limits = limits
        self.output = output
        self.output.worker_total = 0
        self.frames = protocol.FrameBuffer()
        self.info_buffer = b""
        self.pid: int | None = None
        self.status: int | None = None
        self.maxrss_kib: int | None = None
        self.closed = False

    def _stopped(self, ready: list) -> None:
        if self.stop_fd is not None and self.stop_fd in ready:
            self.kill()
            raise WorkerLost("was stopped: the grading was interrupted", "stopped")

    def _waitables(self, *fds: int) -> list[int]:
        return [*fds, *([self.stop_fd] if self.stop_fd is not None else [])]

    def identity(self, wait: float = 2.0) -> tuple[int, int] | None:
        """(pid, start time in clock ticks): names this worker process uniquely on the machine,
        for as long as it lives (a pid alone can be reused)."""
        end = time.monotonic() + wait
        while self.pid is None and self.status is None and time.monotonic() < end:
            ready, _, _ = select.select(self._waitables(self.info), [], [], 0.05)
            if self.stop_fd in ready:
                break
            self._drain_info()
        if self.pid is None:
            return None
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return self.pid, int(f.read().rsplit(")", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            return None

    # -- reading the keeper and the output pipe
    def _drain_info(self) -> None:
        while True:
            try:
                chunk = os.read(self.info, 4096)
            except BlockingIOError:
                return
            if not chunk:
                if self.status is None:
                    self.status = -1  # the keeper is gone
                return
            self.info_buffer += chunk
            *lines, self.info_buffer = self.info_buffer.split(b"\n")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if "pid" in message:
                    self.pid = message["pid"]
                if "status" in message:
                    self.status = message["status"]
                    self.maxrss_kib = message.get("maxrss_kib")

    def _drain_output(self) -> None:
        while True:
            try:
                chunk = os.read(self.out, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.output.add(chunk)
            if self.output.worker_total > self.limits.output_kib << 10:
                self.kill()
                raise WorkerLost(f"printed more than {self.limits.output_kib} KiB (the output "
                                 "limit) and was stopped", "output")

    def _died(self) -> WorkerLost:
        """The socket closed: wait briefly for the keeper's status and explain."""
        end = time.monotonic() + 5
        while self.status is None and time.monotonic() < end:
            ready, _, _ = select.select(self._waitables(self.info), [], [], 0.1)
            if self.stop_fd in ready:
                break  # interrupted: the status is not worth waiting for
            self._drain_info()
        try:
            self._drain_output()
        except WorkerLost:
            pass
        self.close()
        reason = (describe_status(self.status, self.limits) if self.status not in (None, -1)
                  else "died")
        last = self.output.last_line()
        return WorkerLost(reason + (f"; its last output: {last}" if last else ""))

    # -- frames
    def send(self, message: dict, blobs: list[bytes], deadline: float) -> None:
        try:
            data = memoryview(protocol.pack(message, blobs))
        except protocol.Unsendable as err:
            raise HarnessError(str(err)) from None
        while data:
            try:
                sent = self.sock.send(data)
                data = data[sent:]
                continue
            except BlockingIOError:
                pass
            except OSError:
                raise self._died() from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerLost("stopped reading its requests (timed out)", "timeout")
            ready, _, _ = select.select(self._waitables(self.out), [self.sock], [], remaining)
            self._stopped(ready)
            self._drain_output()

    def receive(self, deadline: float, timeout_reason: str) -> tuple[dict, list]:
        while True:
            try:
                payload = self.frames.next()
                if payload is not None:
                    return protocol.unpack(payload)
            except protocol.ProtocolError as err:
                self.kill()
                raise WorkerLost(f"sent a malformed message ({err})", "protocol") from None
            self._drain_output()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerLost(timeout_reason, "timeout")
            ready, _, _ = select.select(self._waitables(self.sock, self.out, self.info), [], [],
                                        remaining)
            self._stopped(ready)
            if self.info in ready:
                self._drain_info()
            if self.sock in ready:
                try:
                    chunk = self.sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    raise self._died()
                self.frames.feed(chunk)

    def kill(self) -> None:
        try:
            os.write(self.kill_w, b"k")
        except OSError:
            pass

    def close(self) -> None:
        """Stop the worker; wait (briefly) for the keeper's report of its status and memory."""
        if self.closed:
            return
        self.closed = True
        self.kill()
        end = time.monotonic() + 1
        while self.status is None and time.monotonic() < end:
            ready, _, _ = select.select(self._waitables(self.info), [], [], 0.05)
            if self.stop_fd in ready:
                break
            self._drain_info()
        for close in (self.sock.close, lambda: os.close(self.info),
                      lambda: os.close(self.kill_w), lambda: os.close(self.out)):
            try:
                close()
            except OSError:
                pass


class Zygote:
    """The fork server: one pre-imported Python that forks a confined worker per request."""

    def __init__(self, hidden: Iterable[str], namespaces: bool = True,
                 seccomp: bool = True) -> None:
        self.namespaces, self.seccomp = namespaces, seccomp
        self.root = tempfile.mkdtemp(prefix="coursekit-root-")
        self.scratch = tempfile.mkdtemp(prefix="coursekit-scratch-")
        os.chmod(self.scratch, 0o1777)
        ours, theirs = socket.socketpair()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "HOME": self.scratch, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, cwd=self.scratch)
        theirs.close()
        self.sock = ours
        from coursekit.grading import sandbox  # only for its list of system paths

        send_json(ours, {"root": self.root, "scratch": self.scratch,
                         "hidden": sorted(set(hidden) | {self.root, self.scratch}),
                         "system": list(sandbox.SYSTEM_PATHS)})
        self.lock = threading.Lock()
        self.ready: dict | None = None

    def wait_ready(self, timeout: float = 300) -> dict:
        if self.ready is None:
            self.sock.settimeout(timeout)
            try:
                message, _ = recv_json(self.sock)
            except (OSError, ValueError) as err:
                raise HarnessError(f"the worker fork server did not start ({err})") from None
            if not message or not message.get("ready"):
                raise HarnessError("the worker fork server did not start "
                                   f"(exit status {self.proc.poll()})")
            self.sock.settimeout(None)
            self.ready = message
        return self.ready

    def spawn(self, uid: int | None, limits: Limits, output: Output, stop_fd: int | None = None,
              started=None) -> tuple[WorkerProcess, dict]:
        """A fresh confined worker, and the facts it reported once confined.

        ``started(worker)`` is called as soon as the worker exists, before it is confined and
        says hello (which can take seconds on a busy machine), so that it can be stopped while it
        starts; ``stop_fd`` becoming readable ends every wait on it at once.
        """
        self.wait_ready()
        with self.lock:
            send_json(self.sock, {"op": "spawn", "uid": uid, "limits": limits.worker(),
                                  "namespaces": self.namespaces, "seccomp": self.seccomp})
            message, fds = recv_json(self.sock, max_fds=4)
        if message is None or len(fds) != 4:
            raise HarnessError("the worker fork server stopped")
        worker = WorkerProcess(fds, limits, output, stop_fd)
        if started is not None:
            started(worker)
        try:
            hello, _ = worker.receive(time.monotonic() + 60, "did not start within 60 s")
        except WorkerLost as lost:
            worker.close()
            if lost.kind == "stopped":
                raise
            raise HarnessError(f"a worker could not start: it {lost.reason}") from None
        if hello.get("op") != "hello":
            worker.close()
            raise HarnessError("a worker did not say hello")
        return worker, hello.get("facts", {})

    def close(self, wait: float = 10) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for folder in (self.root, self.scratch):
            try:
                os.rmdir(folder)
            except OSError:
                pass
