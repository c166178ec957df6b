"""Model weights in the safetensors format, read and written with torch and the standard library
only (the `safetensors` package is not on a node): an 8-byte little-endian header length, a
JSON header naming each tensor's dtype, shape and byte range, then the raw bytes
(https://huggingface.co/docs/safetensors, read 2026-12-05). Safetensors, not a pickled torch
state dict: a pickle runs code when it is loaded, a model mount is data.

Every file is opened relative to its directory's descriptor and never through a link
(validators/nofollow.py): a model file that is a symbolic link is refused, not followed, and a
file written here is created new under a name no one can guess, then renamed into place.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import os
import struct
import warnings

import torch

from validators import nofollow

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
NAMES = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024  # the format's own bound on the header


class ModelError(ValueError):
    """A model file that is not what it claims (a bad header, a tensor past the file's end)."""


def header(fd: int, shown: str) -> tuple[int, dict]:
    """(where the data starts, the header without `__metadata__`) of the open file `fd`."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, 8, 0)
    if len(head) < 8:
        raise ModelError(f"{shown}: {size} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER or 8 + n > size:
        raise ModelError(f"{shown}: header length {n} does not fit the file ({size} bytes)")
    try:
        doc = json.loads(os.pread(fd, n, 8))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{shown}: the header is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ModelError(f"{shown}: the header is not a JSON object")
    doc.pop("__metadata__", None)
    start = 8 + n
    for name, t in doc.items():
        _check_entry(name, t, size - start, shown)
    return start, doc


def _check_entry(name: str, t: object, room: int, shown: str) -> None:
    if not isinstance(t, dict) or t.get("dtype") not in DTYPES:
        raise ModelError(f"{shown}: tensor {name!r}: dtype not one of {', '.join(DTYPES)}")
    shape, offsets = t.get("shape"), t.get("data_offsets")
    ok_shape = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
    ok_offsets = (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= room
    )
    if not ok_shape or not ok_offsets:
        raise ModelError(f"{shown}: tensor {name!r}: bad shape or byte range (file too short?)")
    numel = 1
    for d in shape:
        numel *= d
    want = numel * DTYPES[t["dtype"]].itemsize
    if offsets[1] - offsets[0] != want:
        raise ModelError(
            f"{shown}: tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape}, "
            f"{t['dtype']} needs {want}"
        )


def tensor_bytes(doc: dict) -> int:
    """The bytes the tensors of a header hold."""
    return sum(t["data_offsets"][1] - t["data_offsets"][0] for t in doc.values())


def load(
    name: str, dir_fd: int, device: torch.device, dtype: torch.dtype, *, shown: str = ""
) -> dict[str, torch.Tensor]:
    """Every tensor of the file `name` under `dir_fd`, on `device` in `dtype`."""
    shown = shown or name
    fd = nofollow.open_file(name, dir_fd, shown=shown)
    try:
        start, doc = header(fd, shown)
        out: dict[str, torch.Tensor] = {}
        if not doc:
            return out
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            for key, t in doc.items():
                b, e = t["data_offsets"]
                src_dtype = DTYPES[t["dtype"]]
                with warnings.catch_warnings():
                    # A read-only map: torch warns that the tensor is not writable; it is
                    # copied at once, never written.
                    warnings.simplefilter("ignore", UserWarning)
                    flat = torch.frombuffer(
                        mm, dtype=src_dtype, count=(e - b) // src_dtype.itemsize, offset=start + b
                    )
                out[key] = flat.view(t["shape"]).to(device=device, dtype=dtype, copy=True)
                del flat
        return out
    finally:
        os.close(fd)


def _raw(t: torch.Tensor) -> bytes:
    """A CPU tensor's bytes, copied (no numpy on a node)."""
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def write(name: str, dir_fd: int, tensors: dict[str, torch.Tensor]) -> int:
    """Write `tensors` as the file `name` under `dir_fd` (new file, renamed into place: a link
    at `name` is replaced, never followed); returns the bytes written."""
    entries, at = {}, 0
    for key, t in tensors.items():
        size = t.numel() * t.element_size()
        entries[key] = {
            "dtype": NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [at, at + size],
        }
        at += size
    head = json.dumps(entries, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes with spaces
    fd, tmp = nofollow.create(f".{name}.", dir_fd)
    try:
        with os.fdopen(fd, "wb", closefd=True) as f:
            f.write(struct.pack("<Q", len(head)) + head)
            for t in tensors.values():
                f.write(_raw(t))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return 8 + len(head) + at


def write_json(name: str, dir_fd: int, doc: dict) -> None:
    """A small JSON file `name` under `dir_fd`, created as `write` creates its files."""
    fd, tmp = nofollow.create(f".{name}.", dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", closefd=True) as f:
            json.dump(doc, f, indent=1)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def read_json(name: str, dir_fd: int, *, shown: str = "", limit: int = 16 * 1024 * 1024) -> dict:
    """A JSON object file `name` under `dir_fd`, opened as `load` opens its files."""
    shown = shown or name
    fd = nofollow.open_file(name, dir_fd, shown=shown)
    try:
        raw = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise ModelError(f"{shown}: larger than {limit} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{shown}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ModelError(f"{shown}: not a JSON object")
    return doc
