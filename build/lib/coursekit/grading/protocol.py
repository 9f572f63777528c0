"""The wire between the grader and a sandboxed worker: frames of JSON plus raw tensor bytes.

Nothing is pickled in either direction. A frame is a 4-byte big-endian length, then a 4-byte
header length, a JSON header and the raw bytes of the tensors it mentions::

    frame   = u32 len(payload) · payload
    payload = u32 len(header) · header (UTF-8 JSON) · blob 0 · blob 1 · ...
    header  = {"m": message, "b": [len(blob 0), len(blob 1), ...]}

A value inside a message is a JSON scalar (``None``, ``bool``, ``int``, ``str``, finite
``float``) or a one-key object:

    {"f": "nan" | "inf" | "-inf"}        a non-finite float
    {"l": [...]}, {"u": [...]}           a list, a tuple
    {"d": [[key, value], ...]}           a dict (str or int keys)
    {"t": [dtype, shape, blob]}          a dense CPU tensor (exact ``torch.Tensor``)
    {"ts": [dtype, shape, blob, stride]} the same, laid out in memory with ``stride`` (a
                                         permutation of a contiguous layout: a transpose)
    {"va": [i, shape, stride, offset, value]}  grader -> worker only: a view of the i-th tensor
                                         the worker sent (``value`` if that one's layout was
                                         not sent exactly)
    {"p": [dtype, shape, blob]}          an ``nn.Parameter`` (grader -> worker only)
    {"dt": "float32"}, {"dev": "cpu"}    a dtype, a device
    {"h": [id, type name]}               a handle: an object that stays in the worker

The decoder is strict because the grader reads what student code may have forged: a tensor is
rebuilt from its dtype (from a fixed list), its shape and exactly ``numel * itemsize`` bytes, so
what the grader holds is always a plain ``torch.Tensor`` whatever the worker sent.

The worker loads this file by path, outside the ``coursekit`` package (which it cannot see), so
it imports nothing from coursekit.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any

import torch

BLOCKED = "coursekit"


def blocked_import(name: str) -> ModuleNotFoundError | None:
    """The error an exercise gets for importing coursekit, in the worker (where the package is
    unreachable) and in ``check()`` (where it is loaded but withheld from the exercise's cell), so
    that both give the same verdict; None for any other module."""
    if name == BLOCKED or name.startswith(BLOCKED + "."):
        return ModuleNotFoundError(
            f"No module named {name!r} (the grader runs your code without coursekit: "
            "an exercise must compute its answer itself)", name=name)
    return None


MAX_FRAME = 64 << 20  # bytes; a grading case moves kilobytes
MAX_HEADER = 1 << 20  # bytes of JSON: what the grader will parse (tensor data are blobs)
MAX_DEPTH = 16
MAX_NODES = 100_000
MAX_STR = 1 << 20

DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
              torch.complex128, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.bool)
}
ITEMSIZE = {name: torch.empty((), dtype=d).element_size() for name, d in DTYPES.items()}
_U32 = struct.Struct(">I")


class ProtocolError(Exception):
    """A frame or value that breaks the protocol (a forged or corrupt message)."""


class Unsendable(TypeError):
    """A value that cannot cross the process boundary."""


# ----------------------------------------------------------------------------- tensors


def tensor_blob(t: torch.Tensor) -> bytes:
    """The raw bytes of a dense CPU tensor, in row-major order."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def tensor_from(dtype: str, shape: list, blob: bytes | memoryview) -> torch.Tensor:
    """Rebuild a tensor from its dtype name, shape and bytes; anything inconsistent is refused."""
    if dtype not in DTYPES:
        raise ProtocolError(f"unknown dtype {dtype!r}")
    if (type(shape) is not list or len(shape) > 16
            or any(type(n) is not int or n < 0 for n in shape)):
        raise ProtocolError("a tensor shape must be a list of non-negative ints")
    numel = math.prod(shape)
    if numel * ITEMSIZE[dtype] != len(blob):
        raise ProtocolError(f"a {dtype} tensor of shape {tuple(shape)} needs "
                            f"{numel * ITEMSIZE[dtype]} bytes, got {len(blob)}")
    if numel == 0:
        return torch.empty(shape, dtype=DTYPES[dtype])
    flat = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    return flat.view(DTYPES[dtype]).reshape(shape)


def is_plain_tensor(value: Any) -> bool:
    """Exactly ``torch.Tensor`` (no subclass), dense, on the CPU: what may cross by value."""
    return (type(value) is torch.Tensor and value.layout == torch.strided
            and value.device.type == "cpu" and not value.is_quantized)


# ----------------------------------------------------------------------------- values


class Encoder:
    """Turns a value into JSON plus blobs.

    ``handle`` decides what happens to anything that cannot go by value: the worker keeps the
    object and sends a handle; the grader (``handle=None``) refuses with :class:`Unsendable`.
    ``handle_ref`` recognises the grader's proxies of worker objects so they can be sent back.
    ``parameters`` sends ``nn.Parameter`` as such (grader -> worker); ``plain_subclasses`` sends
    any tensor subclass (a Parameter, say) as its plain data (worker -> grader, for upstream
    arguments: what the grader decodes is a plain tensor whatever was sent).
    ``tuple_subclasses`` sends a tuple subclass (a namedtuple) as a plain tuple of its items.
    ``layout`` keeps a transposed tensor's strides (``"ts"``), and ``views`` (tensors decoded
    from the other side, in order) turns a tensor that shares memory with one of them into a
    view of it (``"va"``): an upstream reference then returns what the book's function returns,
    a view where it returns a view.

    The same tensor object sent twice in one message goes once; the decoder gives back one object
    for it, so arguments that are the same tensor stay the same tensor. ``sources`` lists the
    tensors sent, in blob order.
    """

    def __init__(self, handle: Callable[[Any], list] | None = None,
                 handle_ref: Callable[[Any], int | None] | None = None,
                 parameters: bool = False, plain_subclasses: bool = False,
                 tuple_subclasses: bool = False, layout: bool = False,
                 views: list[torch.Tensor] | None = None) -> None:
        self.blobs: list[bytes] = []
        self.plain_subclasses = plain_subclasses
        self.tuple_subclasses = tuple_subclasses
        self.layout = layout
        self.views = views
        self.size = 0
        self.handle = handle
        self.handle_ref = handle_ref
        self.parameters = parameters
        self.sources: list[torch.Tensor] = []
        self.exact: list[bool] = []  # whether each source's layout was sent as it is
        self._seen: dict[int, dict] = {}

    def tensor(self, key: str, t: torch.Tensor, source: torch.Tensor | None = None) -> dict:
        source = t if source is None else source
        if id(source) in self._seen and self.sources[self._seen[id(source)]["i"]] is source:
            return self._seen[id(source)]["tree"]
        if self.views is not None and key == "t":
            view = self._view(t)
            if view is not None:
                return view
        self.size += t.numel() * t.element_size()  # checked before a copy of it is made
        if self.size > MAX_FRAME:
            raise Unsendable(f"the tensors are too large to send ({self.size >> 20} MiB so far; "
                             f"the limit is {MAX_FRAME >> 20} MiB)")
        self.blobs.append(tensor_blob(t))
        body = [str(t.dtype).removeprefix("torch."), list(t.shape), len(self.blobs) - 1]
        exact = t.is_contiguous()
        if self.layout and key == "t" and not exact and is_permuted_contiguous(t):
            body.append(list(t.stride()))
            key, exact = "ts", True
        tree = {key: body}
        self.sources.append(source)
        self.exact.append(exact)
        self._seen[id(source)] = {"i": len(self.sources) - 1, "tree": tree}
        return tree

    def _view(self, t: torch.Tensor) -> dict | None:
        if t.numel() == 0:
            return None
        storage = t.untyped_storage().data_ptr()
        for i, base in enumerate(self.views):
            if (type(base) is torch.Tensor and base.dtype == t.dtype and base.numel()
                    and base.untyped_storage().data_ptr() == storage):
                fallback = Encoder(layout=True)
                value = fallback(t.contiguous() if not is_permuted_contiguous(t) else t)
                self.blobs += fallback.blobs
                value = _shift_blobs(value, len(self.blobs) - len(fallback.blobs))
                return {"va": [i, list(t.shape), list(t.stride()),
                               t.storage_offset() - base.storage_offset(), value]}
        return None

    def __call__(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise Unsendable(f"the value is nested more than {MAX_DEPTH} levels deep")
        kind = type(value)
        if value is None or kind is bool or kind is int or kind is str:
            return value
        if kind is float:
            return value if math.isfinite(value) else {"f": repr(value)}
        if is_plain_tensor(value) and str(value.dtype).removeprefix("torch.") in DTYPES:
            return self.tensor("t", value)
        if (self.parameters and kind is torch.nn.Parameter
                and str(value.dtype).removeprefix("torch.") in DTYPES):
            return self.tensor("p", value.data, value)
        if (self.plain_subclasses and isinstance(value, torch.Tensor)
                and value.layout == torch.strided and value.device.type == "cpu"
                and str(value.dtype).removeprefix("torch.") in DTYPES):
            return self.tensor("t", value.detach().as_subclass(torch.Tensor), value)
        if kind is list or kind is tuple:
            return {"l" if kind is list else "u": [self(v, depth + 1) for v in value]}
        if self.tuple_subclasses and isinstance(value, tuple):
            return {"u": [self(v, depth + 1) for v in tuple.__iter__(value)]}
        if kind is dict and all(type(k) in (str, int) for k in value):
            return {"d": [[k, self(v, depth + 1)] for k, v in value.items()]}
        if kind is torch.dtype and str(value).removeprefix("torch.") in DTYPES:
            return {"dt": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"dev": str(value)}
        if kind is torch.Generator and value.device.type == "cpu":  # its state; a copy arrives
            return {"g": self(value.get_state(), depth + 1)}
        if self.handle_ref is not None:
            ref = self.handle_ref(value)
            if ref is not None:
                return {"h": [ref, ""]}
        if self.handle is not None:
            return {"h": self.handle(value)}
        raise Unsendable(f"a {kind.__name__} cannot be sent to the worker "
                         "(only tensors, numbers, strings and tuples/lists/dicts of them)")


def is_permuted_contiguous(t: torch.Tensor | None, shape=None, stride=None) -> bool:
    """Whether ``t`` (or a tensor of ``shape`` and ``stride``) fills its memory exactly, in
    some order of its axes (a transpose does)."""
    shape, stride = (t.shape, t.stride()) if t is not None else (shape, stride)
    dims = sorted((st, size) for size, st in zip(shape, stride, strict=True) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _shift_blobs(tree: dict, by: int) -> dict:
    (key, body), = tree.items()
    return {key: [*body[:2], body[2] + by, *body[3:]]}


class Decoder:
    """The strict inverse of :class:`Encoder`. ``handle`` maps ``[id, type name]`` to an object
    (a proxy in the grader, the kept object in the worker); without it handles are refused.
    ``layout`` accepts transposed layouts (``"ts"``); ``views`` (the tensors this side sent, in
    order, and whether each was sent exactly) accepts views of them (``"va"``). ``tensors`` lists
    the tensors decoded, in blob order."""

    def __init__(self, blobs: list[memoryview], handle: Callable[[list], Any] | None = None,
                 parameters: bool = False, layout: bool = False,
                 views: tuple[list[torch.Tensor], list[bool]] | None = None) -> None:
        self.blobs = blobs
        self.handle = handle
        self.parameters = parameters
        self.layout = layout or views is not None
        self.views = views
        self.nodes = 0
        self.tensors: list[torch.Tensor] = []
        self._made: dict[tuple, torch.Tensor] = {}

    def __call__(self, tree: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise ProtocolError("the value is too deeply nested or too large")
        kind = type(tree)
        if tree is None or kind in (bool, int, float):
            return tree
        if kind is str:
            if len(tree) > MAX_STR:
                raise ProtocolError("a string is too long")
            return tree
        if kind is not dict or len(tree) != 1:
            raise ProtocolError(f"malformed value of type {kind.__name__}")
        (key, body), = tree.items()
        if key in ("t", "p") or (key == "ts" and self.layout):
            size = 4 if key == "ts" else 3
            if type(body) is not list or len(body) != size or type(body[2]) is not int:
                raise ProtocolError("malformed tensor")
            if not 0 <= body[2] < len(self.blobs):
                raise ProtocolError("a tensor refers to a missing blob")
            memo = (key, body[0], str(body[1]), body[2], str(body[3:]))
            if memo in self._made:
                return self._made[memo]
            t = tensor_from(body[0], body[1], self.blobs[body[2]])
            if key == "ts":
                t = _restride(t, body[3])
            if key == "p":
                if not self.parameters:
                    raise ProtocolError("parameters are not accepted here")
                t = torch.nn.Parameter(t, requires_grad=t.is_floating_point())
            self._made[memo] = t
            self.tensors.append(t)
            return t
        if key == "va" and self.views is not None:
            if (type(body) is not list or len(body) != 5 or type(body[0]) is not int
                    or type(body[3]) is not int):
                raise ProtocolError("malformed view")
            sources, exact = self.views
            fallback = self(body[4], depth + 1)
            if not 0 <= body[0] < len(sources) or not exact[body[0]]:
                return fallback
            base = sources[body[0]]
            try:
                return base.as_strided(body[1], body[2], base.storage_offset() + body[3])
            except (RuntimeError, TypeError, ValueError):
                return fallback
        if key in ("l", "u"):
            if type(body) is not list:
                raise ProtocolError("malformed sequence")
            items = [self(v, depth + 1) for v in body]
            return items if key == "l" else tuple(items)
        if key == "d":
            if type(body) is not list:
                raise ProtocolError("malformed dict")
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) not in (str, int):
                    raise ProtocolError("malformed dict item")
                out[pair[0]] = self(pair[1], depth + 1)
            return out
        if key == "f" and body in ("nan", "inf", "-inf"):
            return float(body)
        if key == "dt" and body in DTYPES:
            return DTYPES[body]
        if key == "dev" and type(body) is str and len(body) < 32:
            return torch.device(body)
        if key == "g":
            state = self(body, depth + 1)
            if type(state) is not torch.Tensor or state.dtype != torch.uint8 or state.dim() != 1:
                raise ProtocolError("malformed generator state")
            generator = torch.Generator()
            try:
                generator.set_state(state.clone())
            except (RuntimeError, ValueError) as err:
                raise ProtocolError(f"malformed generator state: {err}") from None
            return generator
        if key == "h" and self.handle is not None:
            if (type(body) is not list or len(body) != 2 or type(body[0]) is not int
                    or type(body[1]) is not str):
                raise ProtocolError("malformed handle")
            return self.handle(body)
        raise ProtocolError(f"unknown value kind {key!r}")


def _restride(t: torch.Tensor, stride: Any) -> torch.Tensor:
    if (type(stride) is not list or len(stride) != t.dim()
            or any(type(n) is not int or n < 0 for n in stride)):
        raise ProtocolError("malformed strides")
    if not is_permuted_contiguous(None, list(t.shape), stride):
        raise ProtocolError("strides that do not fill the tensor's memory exactly")
    return torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)


# ----------------------------------------------------------------------------- frames


def pack(message: dict, blobs: list[bytes] = ()) -> bytes:
    """One frame: the message (already encoded) and its blobs."""
    header = json.dumps({"m": message, "b": [len(b) for b in blobs]},
                        separators=(",", ":"), allow_nan=False).encode()
    if len(header) > MAX_HEADER:
        raise Unsendable(f"the message is too large ({len(header) >> 10} KiB of JSON besides "
                         "tensors)")
    payload_len = 4 + len(header) + sum(len(b) for b in blobs)
    if payload_len > MAX_FRAME:
        raise Unsendable(f"the message is too large ({payload_len >> 20} MiB)")
    return b"".join([_U32.pack(payload_len), _U32.pack(len(header)), header, *blobs])


def unpack(payload: bytes | bytearray) -> tuple[dict, list[memoryview]]:
    """Split a frame's payload into its message and blobs, checking every length."""
    view = memoryview(payload)
    if len(view) < 4:
        raise ProtocolError("truncated frame")
    header_len = _U32.unpack(view[:4])[0]
    if header_len > len(view) - 4 or header_len > MAX_HEADER:
        raise ProtocolError("the header is longer than the frame or the limit")
    try:
        header = json.loads(bytes(view[4:4 + header_len]))
    except (ValueError, RecursionError) as err:
        raise ProtocolError(f"the header is not JSON ({err})") from None
    if (type(header) is not dict or type(header.get("m")) is not dict
            or type(header.get("b")) is not list
            or any(type(n) is not int or n < 0 for n in header["b"])):
        raise ProtocolError("malformed header")
    blobs, offset = [], 4 + header_len
    for n in header["b"]:
        blobs.append(view[offset:offset + n])
        offset += n
    if offset != len(view):
        raise ProtocolError("the blobs do not add up to the frame")
    return header["m"], blobs


class FrameBuffer:
    """Incremental reader: feed it bytes as they arrive, take whole frames out."""

    def __init__(self) -> None:
        self.data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.data += chunk

    def next(self) -> bytes | None:
        if len(self.data) < 4:
            return None
        size = _U32.unpack(self.data[:4])[0]
        if size > MAX_FRAME:
            raise ProtocolError(f"a frame of {size} bytes is over the {MAX_FRAME} byte limit")
        if len(self.data) < 4 + size:
            return None
        payload = bytes(self.data[4:4 + size])
        del self.data[:4 + size]
        return payload


def read_frame(read: Callable[[int], bytes]) -> bytes | None:
    """Blocking read of one frame's payload with ``read(n)``; None at a clean end of stream."""
    head = _read_exactly(read, 4)
    if head is None:
        return None
    size = _U32.unpack(head)[0]
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size} bytes is over the {MAX_FRAME} byte limit")
    payload = _read_exactly(read, size)
    if payload is None:
        raise ProtocolError("the stream ended inside a frame")
    return payload


def _read_exactly(read: Callable[[int], bytes], n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = read(min(n - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError("the stream ended inside a frame")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
