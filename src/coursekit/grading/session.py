"""One submission's conversation with its worker: cells, cases, remote objects, upstreams.

A :class:`Session` runs a submission's exercise cells in a worker, then each case of each suite:
``suite.run(fn, inputs)`` runs here, in the grader, with ``fn`` a :class:`Remote` handle to the
student's function or class, so a suite's ``call`` adapter (build the class, load weights, call
it) works unchanged. What comes back is decoded strictly (:mod:`protocol`); exceptions raised by
student code come back as :class:`RemoteError` subclasses named after the student's exception.

While a downstream exercise runs, the worker binds its upstream exercises' names to stubs that
ask for the reference's result (``suite.solution``, the object ``check()`` hands the chapter);
:meth:`Session.serve_upstream` computes it here, within :class:`Bounds` taken from the case.

A worker that dies or overruns costs the step it was running; the session starts a fresh one,
replays the cells that loaded, and goes on.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import os
import re
import threading
import time
from collections import Counter
from typing import Any

import torch

from coursekit.grading import protocol
from coursekit.grading.cells import usable_provided
from coursekit.grading.submissions import ExerciseCode
from coursekit.grading.suite import (
    Attempt,
    OutputError,
    Suite,
    as_outputs,
    describe_exception,
)
from coursekit.grading.worker_pool import (
    HarnessError,
    Limits,
    Output,
    WorkerLost,
    WorkerProcess,
    Zygote,
    clean,
)

UID_BASE = 64000  # worker slot k runs as uid UID_BASE + k when the grader is root
MAX_UPSTREAM_CALLS = 10_000  # per case
# Reference modules the grader builds for one case of one submission (an upstream class the
# exercise instantiates): at most this many, holding at most this many numbers together
# (2^22 float32 numbers: 16 MiB), so a submission cannot make the grader's process grow.
MAX_INSTANCES = 64
MAX_INSTANCE_NUMBERS = 1 << 22


def _size_on_meta(cls: type, args: tuple, kwargs: dict) -> int | None:
    """How many numbers an instance would hold, built on the meta device (no memory); None when
    it cannot be built there (then it is built for real and measured)."""
    try:
        with torch.device("meta"):
            module = cls(*args, **kwargs)
        return sum(t.numel() for t in module.state_dict().values())
    except Exception:  # noqa: BLE001 (a reference that needs real tensors to be built)
        return None


def _too_large(size: int) -> str:
    return (f"the reference would hold {size:,} numbers; the grader builds references of at "
            f"most {MAX_INSTANCE_NUMBERS:,} numbers in all per case")


class TimeUp(Exception):
    """The submission's time budget is spent."""


class RemoteError(Exception):
    """An exception raised by student code in the worker; its class carries the student's
    exception type name, so ``describe_exception`` reads as it does in the notebook."""


_remote_errors: dict[str, type[RemoteError]] = {}
_remote_types: dict[str, type] = {}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def _remote_error(name: str) -> type[RemoteError]:
    """A class named like the student's exception; it also derives from the builtin exception
    of that name (never from SystemExit and the like), so that an adapter's ``except
    AttributeError`` or ``getattr(obj, name, default)`` behaves as it does in the notebook."""
    name = name if isinstance(name, str) and _NAME.fullmatch(name) else "Exception"
    if name not in _remote_errors:
        builtin = getattr(builtins, name, None)
        bases: tuple[type, ...] = (RemoteError,)
        if (isinstance(builtin, type) and issubclass(builtin, Exception)
                and builtin is not Exception and not issubclass(builtin, StopIteration)):
            bases = (RemoteError, builtin)
        try:
            _remote_errors[name] = type(name, bases, {})
        except TypeError:  # incompatible layouts (OSError and a few others)
            _remote_errors[name] = type(name, (RemoteError,), {})
    return _remote_errors[name]


class Remote:
    """A handle to an object that lives in the worker. Calls, attribute and item access,
    iteration and ``len`` are forwarded; results come back by value when they are plain
    tensors or numbers, as new handles otherwise. Its class is named after the remote type."""

    __slots__ = ("_ck_session", "_ck_id")

    def __init__(self, session: Session, key: int) -> None:
        object.__setattr__(self, "_ck_session", session)
        object.__setattr__(self, "_ck_id", key)

    def _ck(self, op: str, **fields: Any) -> Any:
        return self._ck_session.request({"op": op, "target": self, **fields})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ck("call", args=args, kwargs=kwargs)

    def _ck_backward(self, args: tuple, kwargs: dict, wrt: list[int], params: bool,
                     first: int | None = None) -> tuple:
        """:func:`coursekit.grading.autodiff.backward_call`, run in the worker."""
        reply = self._ck("backward", args=tuple(args), kwargs=kwargs, wrt=list(wrt),
                         params=bool(params), first=first)
        if type(reply) is not dict or set(reply) != {"value", "grads", "params"} \
                or type(reply["grads"]) is not list or type(reply["params"]) is not list \
                or any(type(p) is not list or len(p) != 2 or type(p[0]) is not str
                       for p in reply["params"]):
            raise OutputError("the backward pass sent back a malformed reply")
        return reply["value"], reply["grads"], [(name, g) for name, g in reply["params"]]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ck("getattr", name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ck("setattr", name=name, value=value)

    def __getitem__(self, key: Any) -> Any:
        return self._ck("getitem", key=key)

    def __iter__(self) -> Any:
        return self._ck("iter")

    def __next__(self) -> Any:
        return self._ck("next")

    def __len__(self) -> int:
        return self._ck("len")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} in the worker>"


def _remote_type(name: str) -> type:
    name = name if isinstance(name, str) and _NAME.fullmatch(name) else "object"
    if name not in _remote_types:
        _remote_types[name] = type(name, (Remote,), {"__slots__": ()})
    return _remote_types[name]


@dataclasses.dataclass
class Context:
    suites: dict[str, Suite]
    hidden: dict[str, set[int]]
    limits: Limits
    zygote: Zygote | None
    fingerprint: str
    isolation: dict | None = None
    concept_points: float = 0.0  # points per concept check asked (0: recorded, ungraded)
    stopping: bool = False  # set on Ctrl-C: live workers are killed, no more steps start
    live: set = dataclasses.field(default_factory=set)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    workers: set = dataclasses.field(default_factory=set)  # (pid, start time) of each worker
    # Readable once stop() is called: every wait on a worker watches it, so that Ctrl-C never
    # waits for a worker that is starting, busy or slow to die.
    stop_r: int = -1
    stop_w: int = -1

    def __post_init__(self) -> None:
        self.stop_r, self.stop_w = os.pipe()

    def started(self, worker: WorkerProcess) -> None:
        """Called as soon as a worker exists, before it says hello: from then on stop() kills
        it."""
        with self.lock:
            self.live.add(worker)
            if self.stopping:
                worker.kill()

    def stop(self) -> None:
        self.stopping = True
        try:
            os.write(self.stop_w, b"s")
        except OSError:
            pass
        with self.lock:
            for worker in list(self.live):
                worker.kill()

    def close(self) -> None:
        for fd in (self.stop_r, self.stop_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def chapter(self, key: str | None) -> list[Suite]:
        """The suites a submission graded as ``key`` must answer: a notebook of a split chapter
        ("07b": its own exercises), a chapter ("07": all of them), or a later notebook of a
        chapter whose exercises all live in its first one ("02b": chapter 02's)."""
        found = [s for s in self.suites.values() if s.notebook and s.notebook == key]
        if not found and key:
            found = [s for s in self.suites.values() if s.chapter == key[:2]
                     and (len(key) == 2 or not s.notebook)]
        return sorted(found, key=lambda s: [int(p) for p in s.exercise.split(".")])

    def key_for(self, exercises: set[str]) -> str | None:
        """The notebook or chapter most of these exercise ids belong to."""
        votes = Counter(s.key for s in self.suites.values() if s.exercise in exercises)
        return votes.most_common(1)[0][0] if votes else None


class Bounds:
    """How large an upstream request may be: a few times the case's own inputs."""

    def __init__(self, inputs: Any) -> None:
        dims, numels, ints = [1], [1], [1]

        def walk(value: Any, depth: int = 0) -> None:
            if depth > 8:
                return
            if isinstance(value, torch.Tensor):
                dims.extend(value.shape)
                numels.append(value.numel())
            elif isinstance(value, bool):
                return
            elif isinstance(value, int):
                ints.append(abs(value))
            elif isinstance(value, (list, tuple)):
                for v in value:
                    walk(v, depth + 1)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v, depth + 1)

        walk(inputs)
        self.dim = max(4 * max(dims), 64)
        self.numel = max(16 * max(numels), 1 << 16)
        self.int = max(4 * max(ints + dims), 1024)
        self.budget = 1000 * self.numel

    def check(self, value: Any, depth: int = 0) -> None:
        if isinstance(value, torch.Tensor):
            if any(n > self.dim for n in value.shape) or value.numel() > self.numel:
                raise ValueError(f"a tensor of shape {tuple(value.shape)} is far larger than "
                                 "anything this case passes in")
            self.budget -= value.numel()
            if self.budget < 0:
                raise ValueError("too much data sent to the reference in one case")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.int:
            raise ValueError(f"the number {value} is far larger than anything this case uses")
        elif isinstance(value, (list, tuple)):
            for v in value:
                self.check(v, depth + 1)
        elif isinstance(value, dict):
            for v in value.values():
                self.check(v, depth + 1)


class Session:
    """One submission's conversation with its (restartable) worker."""

    def __init__(self, ctx: Context, slot: int, deadline: float,
                 provided: dict[str, str] | None = None) -> None:
        self.ctx, self.slot, self.deadline = ctx, slot, deadline
        # The exercises the notebook imports from coursekit (see coursekit.grading.cells).
        self.provided = {k: v for k, v in (provided or {}).items() if v in ctx.suites}
        self.worker: WorkerProcess | None = None
        self.facts: dict = {}
        self.output = Output()
        self.loaded: list[tuple[str, ExerciseCode]] = []
        self.load_errors: dict[str, str] = {}
        self.events: list[str] = []
        self.harness_errors: list[str] = []
        self.step_deadline = deadline
        self.step_reason = "timed out"
        self.allowed: dict[str, Suite] = {}
        self.bounds: Bounds | None = None
        self.instances: dict[int, torch.nn.Module] = {}
        self.instance_numbers = 0  # parameters and buffers of the instances above
        self.upstream_calls = 0
        self.peak_kib = 0

    # -- worker lifecycle
    def _spawn(self) -> None:
        uid = UID_BASE + self.slot if os.geteuid() == 0 else None
        self.worker, facts = self.ctx.zygote.spawn(uid, self.ctx.limits, self.output,
                                                   stop_fd=self.ctx.stop_r,
                                                   started=self.ctx.started)
        self.facts = self.facts or facts
        identity = self.worker.identity()
        if identity is not None:
            with self.ctx.lock:
                self.ctx.workers.add(identity)

    def _retire(self) -> None:
        if self.worker is not None:
            with self.ctx.lock:
                self.ctx.live.discard(self.worker)
            self.worker.close()
            self.peak_kib = max(self.peak_kib, self.worker.maxrss_kib or 0)
        self.worker = None

    def _lost(self, lost: WorkerLost) -> None:
        self._retire()
        self.events.append(lost.kind)

    def _step_timeout(self) -> float:
        now = time.monotonic()
        if now >= self.deadline or self.ctx.stopping:
            raise TimeUp
        self.step_deadline = min(now + self.ctx.limits.case_timeout, self.deadline)
        self.step_reason = (f"timed out after {self.ctx.limits.case_timeout:g} s"
                            if self.step_deadline < self.deadline else
                            f"ran out of the submission's time ({self.ctx.limits.timeout:g} s)")
        return self.step_deadline

    def ensure(self) -> None:
        """A live worker holding every cell that loaded so far (replayed after a restart)."""
        while self.worker is None:
            self._step_timeout()
            self._spawn()
            for name, code in list(self.loaded):
                try:
                    reply, _ = self.exchange(self._exec_message(name, code),
                                             self._step_timeout(), [_source_blob(code)])
                except WorkerLost as lost:
                    self._lost(lost)
                    self.loaded.remove((name, code))
                    self.load_errors[name] = f"the cell's worker {lost.reason} when it was re-run"
                    break
                if reply.get("op") != "ok":
                    self.loaded.remove((name, code))
                    self.load_errors[name] = "the cell did not run when re-run: " + \
                        _error_text(reply)

    def _exec_message(self, name: str, code: ExerciseCode) -> dict:
        """Run the cell in a namespace of its own, with the provided exercises bound (never the
        exercise itself: a cell that does not define it must not get the reference)."""
        kinds = {local: [ex, "class" if inspect.isclass(self.ctx.suites[ex].solution)
                         else "function"]
                 for local, ex in usable_provided(self.provided, name, self.ctx.suites).items()}
        return {"op": "exec", "filename": code.filename, "space": name, "provided": kinds}

    def close(self) -> None:
        self._retire()

    # -- one exchange with the worker, serving upstream requests on the way
    def exchange(self, message: dict, deadline: float, blobs: list[bytes] = ()) -> tuple:
        assert self.worker is not None
        worker = self.worker
        worker.send(message, list(blobs), deadline)
        while True:
            reply, reply_blobs = worker.receive(deadline, self.step_reason)
            if reply.get("op") != "upstream":
                return reply, reply_blobs
            answer, answer_blobs = self.serve_upstream(reply, reply_blobs)
            worker.send(answer, answer_blobs, deadline)

    def request(self, message: dict) -> Any:
        """Send one operation on remote objects; decode its result (handles become Remotes)."""
        if self.worker is None:
            raise WorkerLost("is gone")
        encoder = protocol.Encoder(
            handle_ref=lambda v: v._ck_id if isinstance(v, Remote) and v._ck_session is self
            else None, parameters=True, layout=True)  # a transposed argument stays transposed
        try:
            body = {k: (v if k in ("op", "name", "seed", "upstream") else encoder(v))
                    for k, v in message.items()}
        except protocol.Unsendable as err:
            raise HarnessError(str(err)) from None
        body["grad"] = torch.is_grad_enabled()
        try:
            reply, blobs = self.exchange(body, self.step_deadline, encoder.blobs)
        except WorkerLost as lost:
            self._lost(lost)
            raise
        op = reply.get("op")
        if op == "stop":
            raise StopIteration
        if op == "error":
            raise _remote_error(reply.get("type"))(self._error_message(reply))
        if op != "ok":
            lost = WorkerLost("sent an unexpected reply", "protocol")
            self._lost(lost)
            raise lost
        try:
            decode = protocol.Decoder(blobs, handle=lambda ref: _remote_type(ref[1])(self, ref[0]))
            value = decode(reply.get("value"))
            if message.get("op") in ("call", "backward"):
                self._write_back(encoder.sources, decode(reply.get("after", {"l": []})))
                arguments = decode(reply.get("arguments", None))
                if type(arguments) is tuple and len(arguments) == 2:
                    _mirror(message.get("args", ()), arguments[0])
                    _mirror(message.get("kwargs", {}), arguments[1])
            return value
        except protocol.ProtocolError as err:
            lost = WorkerLost(f"sent a malformed message ({err})", "protocol")
            self._lost(lost)
            raise lost from None

    @staticmethod
    def _write_back(sent: list, after: Any) -> None:
        """Mirror what a call did to its arguments in the worker onto the grader's own tensors,
        so that a case compares its arguments before and after the call here, as ``check()``
        does in the notebook."""
        if type(after) is not list:
            raise protocol.ProtocolError("malformed arguments after the call")
        for mine, theirs in zip(sent, after, strict=False):
            if type(mine) is not torch.Tensor or type(theirs) is not torch.Tensor:
                continue
            same = (mine.shape == theirs.shape and mine.dtype == theirs.dtype
                    and bool(((mine == theirs) | (mine != mine) & (theirs != theirs)).all()))
            if same:
                continue
            with torch.no_grad():
                try:
                    if mine.shape == theirs.shape and mine.dtype == theirs.dtype:
                        mine.copy_(theirs)
                    else:
                        mine.set_(theirs.clone())
                except RuntimeError:
                    pass

    def _error_message(self, reply: dict) -> str:
        """A student exception's message, with where it happened and which limit it hit."""
        kind, text = str(reply.get("type")), clean(reply.get("message", ""))
        notes = []
        if isinstance(reply.get("line"), int):
            notes.append(f"line {reply['line']} of the exercise cell")
        if kind == "MemoryError" or "can't allocate memory" in text:
            notes.append(f"the grader allows {self.ctx.limits.memory_mib} MiB of memory")
        if "Resource temporarily unavailable" in text or "can't start new thread" in text:
            notes.append("the grader runs exercises without new processes or threads")
        if reply.get("network"):
            notes.append("exercises run without network access")
        return " ".join(filter(None, [text, f"({'; '.join(notes)})" if notes else ""]))

    # -- the reference for an upstream exercise, computed here
    def serve_upstream(self, message: dict, blobs: list) -> tuple[dict, list[bytes]]:
        name = message.get("name")
        suite = self.allowed.get(name) if isinstance(name, str) else None

        def refuse(kind: str, text: str) -> tuple[dict, list]:
            return {"op": "upstream_error", "type": kind, "message": text}, []

        if suite is None:
            return refuse("PermissionError", f"{clean(name, 60)} is not an upstream exercise "
                                             "of the exercise being graded")
        self.upstream_calls += 1
        if self.upstream_calls > MAX_UPSTREAM_CALLS:
            return refuse("RuntimeError", "too many calls to the reference in one case")
        try:
            decode = protocol.Decoder(blobs, layout=True)
            args, kwargs = decode(message.get("args")), decode(message.get("kwargs"))
            state = decode(message.get("state", {"d": []}))
        except protocol.ProtocolError as err:
            return refuse("ValueError", f"malformed arguments ({err})")
        if type(args) is not tuple or type(kwargs) is not dict or type(state) is not dict \
                or not all(type(k) is str for k in kwargs):
            return refuse("TypeError", "malformed arguments")
        try:
            self.bounds.check((args, kwargs, state))
        except ValueError as err:
            return refuse("ValueError", str(err))
        kind = message.get("kind")
        if kind == "vjp":
            return self._vjp(suite, message, args, kwargs, state)
        try:
            with torch.no_grad():
                if kind == "call":
                    value = suite.solution(*args, **kwargs)
                elif kind == "new":
                    if len(self.instances) >= MAX_INSTANCES:
                        return refuse("RuntimeError", "too many instances in one case")
                    size = _size_on_meta(suite.solution, args, kwargs)
                    if size is not None and size + self.instance_numbers > MAX_INSTANCE_NUMBERS:
                        return refuse("MemoryError", _too_large(size))
                    module = suite.solution(*args, **kwargs)
                    size = sum(t.numel() for t in module.state_dict().values())
                    if size + self.instance_numbers > MAX_INSTANCE_NUMBERS:
                        del module
                        return refuse("MemoryError", _too_large(size))
                    self.instance_numbers += size
                    key = len(self.instances)
                    self.instances[key] = module
                    params = {n: p.detach() for n, p in module.named_parameters()}
                    value = {"key": key, "parameters": params,
                             "buffers": {n: t.detach() for n, t in module.state_dict().items()
                                         if n not in params}}
                elif kind == "forward" and message.get("key") in self.instances:
                    module = self.instances[message["key"]]
                    module.load_state_dict(state, strict=True)
                    module.train(bool(message.get("training")))
                    value = module(*args, **kwargs)
                else:
                    return refuse("ValueError", "malformed request")
        except Exception as err:  # the student's arguments made the reference fail
            text = str(err).strip().splitlines()
            return refuse(type(err).__name__, clean(text[-1] if text else ""))
        encoder = protocol.Encoder(layout=True, views=decode.tensors)
        try:
            tree = encoder(value)
        except protocol.Unsendable as err:
            self.harness_errors.append(f"the reference {name} returned something that cannot be "
                                       f"sent to the worker: {err}")
            return refuse("RuntimeError", "the reference's result cannot be sent")
        return {"op": "upstream_ok", "value": tree}, encoder.blobs

    def _vjp(self, suite: Suite, message: dict, args: tuple, kwargs: dict, extra: dict) -> tuple:
        """The backward pass of an upstream reference (a function, or the forward of a module
        made by a stub): the gradients of Σ ⟨cotangent, output⟩ with respect to each tensor
        argument (positional, then keyword), then to the parameters ``extra["params"]`` names."""
        def refuse(text: str) -> tuple[dict, list]:
            return {"op": "upstream_error", "type": "RuntimeError", "message": text}, []

        places = [("a", i) for i, a in enumerate(args) if type(a) is torch.Tensor] + [
            ("k", k) for k, a in kwargs.items() if type(a) is torch.Tensor]
        cotangents, names = extra.get("cotangents"), extra.get("params", [])
        if type(cotangents) is not list or any(c is not None and type(c) is not torch.Tensor
                                               for c in cotangents):
            return refuse("malformed gradients")
        call, weights = suite.solution, {}
        if message.get("of") == "forward":
            module = self.instances.get(message.get("key"))
            state = extra.get("state")
            owned = dict(module.named_parameters()) if module is not None else {}
            if module is None or type(state) is not dict or type(names) is not list \
                    or not all(type(n) is str and n in owned for n in names):
                return refuse("malformed request")
            try:
                module.load_state_dict(state, strict=True)
            except Exception:
                return refuse("malformed state")
            module.train(bool(message.get("training")))
            weights = {n: owned[n].detach().clone().requires_grad_(True) for n in names}

            def call(*a, **k):
                return torch.func.functional_call(module, weights, a, k)
        elif names:
            return refuse("malformed request")
        args, kwargs = list(args), dict(kwargs)
        leaves = []
        for where, i in places:
            given = args[i] if where == "a" else kwargs[i]
            leaf = given.detach().clone().requires_grad_(given.is_floating_point())
            leaves.append(leaf)
            if where == "a":
                args[i] = leaf
            else:
                kwargs[i] = leaf
        try:
            with torch.enable_grad():
                value = call(*args, **kwargs)
                outputs = list(value) if isinstance(value, tuple) else [value]
                pairs = [(o, c) for o, c in zip(outputs, cotangents, strict=False)
                         if c is not None and type(o) is torch.Tensor and o.requires_grad
                         and c.shape == o.shape]
                wanted = [t for t in leaves if t.requires_grad] + list(weights.values())
                found = torch.autograd.grad([o for o, _ in pairs], wanted,
                                            [c.to(o.dtype) for o, c in pairs],
                                            allow_unused=True) if pairs and wanted else []
        except Exception as err:  # the student's arguments made the reference fail
            text = str(err).strip().splitlines()
            return refuse(clean(text[-1] if text else ""))
        it = iter(found or [None] * len(wanted))
        grads = [next(it) if t.requires_grad else None for t in leaves]
        grads += [next(it) for _ in weights]
        encoder = protocol.Encoder()
        return {"op": "upstream_ok", "value": encoder([g for g in grads])}, encoder.blobs

    # -- grading steps
    def load(self, codes: list[tuple[str, ExerciseCode]]) -> None:
        """Run the exercise cells in notebook order; a failing cell costs its own exercise."""
        for name, code in codes:
            try:
                self.ensure()
                reply, _ = self.exchange(self._exec_message(name, code), self._step_timeout(),
                                         [_source_blob(code)])
            except TimeUp:
                self.load_errors[name] = (f"not run: the submission used up its time limit "
                                          f"({self.ctx.limits.timeout:g} s)")
                continue
            except WorkerLost as lost:
                self._lost(lost)
                self.load_errors[name] = f"the cell's worker {lost.reason}"
                continue
            if reply.get("op") == "ok":
                self.loaded.append((name, code))
            else:
                self.load_errors[name] = "the cell did not run: " + _error_text(reply)

    def run_cases(self, suite: Suite) -> list[Attempt]:
        """Every case's outputs, or why there are none. After a case times out, the exercise's
        other cases are not run: one endless loop must not use up the time of the exercises
        after it."""
        submitted: list[Attempt] = []
        for index in range(len(suite.cases)):
            events = len(self.events)
            submitted.append(self.run_case(suite, index))
            if "timeout" in self.events[events:]:
                left = len(suite.cases) - len(submitted)
                submitted += [Attempt(error="not run: an earlier case of this exercise timed "
                                            "out") for _ in range(left)]
                break
        return submitted

    def run_case(self, suite: Suite, index: int) -> Attempt:
        """The submission's outputs for one case, or why there are none, and the arguments it
        modified in place (written back from the worker, compared here)."""
        names = [*suite.upstream,
                 *usable_provided(self.provided, suite.name, self.ctx.suites).values()]
        self.allowed = {u: self.ctx.suites[u] for u in names if u in self.ctx.suites}
        self.instances = {}
        self.instance_numbers = 0
        self.upstream_calls = 0
        args = None
        try:
            self.ensure()
            self._step_timeout()
            args = suite.inputs(index)
            self.bounds = Bounds(args)
            kinds = {u: "class" if inspect.isclass(s.solution) else "function"
                     for u, s in self.allowed.items() if u in suite.upstream}
            fn = self.request({"op": "begin", "name": suite.name, "upstream": kinds,
                               "seed": index})
            attempt = Attempt(outputs=as_outputs(suite.run(fn, args, index)))
        except OutputError as err:
            attempt = Attempt(error=f"returned the wrong type: {err}")
        except WorkerLost as lost:
            return Attempt(error=f"the worker {lost.reason} while running this case")
        except TimeUp:
            return Attempt(error="not run: the submission used up its time limit "
                                 f"({self.ctx.limits.timeout:g} s)")
        except HarnessError as err:
            self.harness_errors.append(f"{suite.name}: {err}")
            return Attempt(error=f"grader error: {err}")
        except Exception as err:  # the student's bug, as in the notebook's check()
            attempt = Attempt(error=describe_exception(err))
        if args is not None:
            attempt.modified = tuple(suite.modified_arguments(index, args))
        return attempt


def _mirror(mine: Any, theirs: Any, depth: int = 0) -> None:
    """Make the grader's lists and dicts (the case's arguments) what the call left in the
    worker (``theirs``: their plain data, tensors as None), so that a list of ids the call
    rewrote is seen as modified here, as ``check()`` sees it in the notebook."""
    if depth > 8:
        return
    if type(mine) is list and type(theirs) is list and len(mine) != len(theirs):
        mine[:] = [m if isinstance(m, torch.Tensor) and t is None else t
                   for m, t in zip(mine, theirs, strict=False)] + theirs[len(mine):]
        return
    if type(mine) in (list, tuple) and type(theirs) in (list, tuple):
        for i, (m, t) in enumerate(zip(mine, theirs, strict=False)):
            if type(m) in (list, tuple, dict):
                _mirror(m, t, depth + 1)
            elif type(mine) is list and not isinstance(m, torch.Tensor) and (
                    type(m) is not type(t) or m != t):
                mine[i] = t
    elif type(mine) is dict and type(theirs) is dict:
        for key in [k for k in mine if k not in theirs]:
            del mine[key]
        for key, t in theirs.items():
            m = mine.get(key)
            if type(m) in (list, tuple, dict):
                _mirror(m, t, depth + 1)
            elif key not in mine or not isinstance(m, torch.Tensor) and (
                    type(m) is not type(t) or m != t):
                mine[key] = t


def _source_blob(code: ExerciseCode) -> bytes:
    """A cell's source travels as a blob, not in the message's JSON header: an honest cell may
    be large (pasted output in a comment), and the header is capped at a MiB."""
    return code.source.encode("utf-8", "surrogatepass")


def _error_text(reply: dict) -> str:
    line = reply.get("line")
    where = f" (line {line} of the cell)" if isinstance(line, int) else ""
    text = f"{clean(reply.get('type'), 100)}: {clean(reply.get('message', ''))}{where}"
    if "coursekit" in text:
        text += ". The grader runs exercises without coursekit: compute the answer yourself"
    return text
