"""A node without the job's newest checkpoint gets it from a node that has it, over the job's
process group: a node that returned to an elastic job (its array holds an older checkpoint, or
none) or a replacement. The files of the checkpoint directory go whole from the first rank
that holds it to every node's first rank that lacks it, as one object broadcast, and are put in
place as the job puts its own (written aside, renamed); the job then resumes from it on every
node. Meant for checkpoints that fit in a rank's memory (the validators' jobs); a larger one
belongs on the object tier, which the job restores from first."""

from __future__ import annotations

import json
import os

import torch.distributed as dist

from validators.resume import PROGRESS, Store


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for top, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(top, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


def _put(store: Store, step: int, files: dict[str, bytes]) -> None:
    tmp = store.begin(step)
    for rel, data in files.items():
        if rel == PROGRESS:
            continue
        dest = os.path.join(tmp, rel)
        if os.path.dirname(rel):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as fh:
            fh.write(data)
    store.publish(step, json.loads(files[PROGRESS]))


def share_newest(store: Store, leader: bool, group=None) -> tuple[dict | None, str | None]:
    """Collective: every node's first rank ends up holding the newest checkpoint any of them
    holds. Returns (what was copied: step, from which rank, bytes; None when every node had it)
    and this rank's error (None when fine); the caller agrees on errors."""
    world = dist.get_world_size(group)
    held: list = [None] * world
    dist.all_gather_object(held, store.steps() if leader else None, group=group)
    newest = max((max(s, default=0) for s in held if s is not None), default=0)
    lacking = [r for r, s in enumerate(held) if s is not None and newest not in s]
    if not newest or not lacking:
        return None, None
    src = next(r for r, s in enumerate(held) if s is not None and newest in s)
    box = [_files(store.path(newest)) if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src, group=group)
    size = sum(len(b) for b in box[0].values())
    err = None
    if dist.get_rank() in lacking:
        try:
            _put(store, newest, box[0])
        except OSError as exc:
            err = f"cannot put checkpoint step {newest} from rank {src} in place: {exc}"
    return {"step": newest, "from_rank": src, "bytes": size, "to_ranks": lacking}, err
