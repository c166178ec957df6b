"""A stack's state holds each of the targets' dynamic providers pickled by reference to its
module path: the blobs below are what rackform wrote into a stack's state before the target
layer was split (each `__provider` input, as pulumi's `serialize_provider` made it). They must
still load, and act, under this tree; and a stack written now records the same bytes, so an
`up` finds no provider changed."""

from __future__ import annotations

import base64

import dill
import pulumi.dynamic.dynamic as dynamic

from rackform.targets.aws.access import NodeKeysProvider
from rackform.targets.aws.image_pin import ImagePinProvider
from rackform.targets.onprem.hosts import HostProvider

RECORDED = {
    HostProvider: (
        "gASVUAAAAAAAAACMHXJhY2tmb3JtLnRhcmdldHMub25wcmVtLmhvc3RzlIwMSG9zdFByb3ZpZGVylJOUKYGUfZSM"
        "CHByb2JlX2ZulGgAjAVwcm9iZZSTlHNiLg=="
    ),
    NodeKeysProvider: (
        "gASVNwAAAAAAAACMG3JhY2tmb3JtLnRhcmdldHMuYXdzLmFjY2Vzc5SMEE5vZGVLZXlzUHJvdmlkZXKUk5QpgZQu"
    ),
    ImagePinProvider: (
        "gASVOgAAAAAAAACMHnJhY2tmb3JtLnRhcmdldHMuYXdzLmltYWdlX3BpbpSMEEltYWdlUGluUHJvdmlkZXKUk5Qp"
        "gZQu"
    ),
}


def loaded(cls):
    """The recorded provider, loaded as pulumi's provider process loads it."""
    return dill.loads(base64.b64decode(RECORDED[cls]))


def test_recorded_providers_load_as_their_classes():
    for cls in RECORDED:
        assert type(loaded(cls)) is cls


def test_a_stack_written_now_records_the_same_providers():
    for cls, blob in RECORDED.items():
        assert dynamic.serialize_provider(cls()) == blob, cls.__name__


def test_recorded_providers_diff_read_and_delete_under_this_tree():
    host = loaded(HostProvider)
    old = {"name": "h1", "address": "10.0.0.1", "port": 22, "user": "ubuntu"}
    moved = host.diff("h1", old, {**old, "address": "10.0.0.2"})
    assert (moved.changes, moved.replaces) == (True, ["address"])
    assert host.diff("h1", old, dict(old)).changes is False
    host.probe_fn = lambda user, address, port: {"gpus": 8}  # no SSH in a test
    assert host.read("h1", old).outs["facts"] == {"gpus": 8}
    assert host.delete("h1", old) is None  # releases the registration, touches nothing

    keys = loaded(NodeKeysProvider)
    assert keys.diff("k", {"cluster": "a"}, {"cluster": "a"}).changes is False
    assert keys.diff("k", {"cluster": "a"}, {"cluster": "b"}).replaces == ["cluster"]

    pin = loaded(ImagePinProvider)
    assert pin.diff("p", {"image": "ubuntu-22.04"}, {"image": "ubuntu-22.04"}).changes is False
    assert pin.diff("p", {"image": "ubuntu-22.04"}, {"image": "ami-1"}).replaces == ["image"]
    assert pin.create({"image": "ami-1", "image_id": "ami-1"}).outs["image_id"] == "ami-1"
