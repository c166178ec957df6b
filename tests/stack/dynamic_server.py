"""Pulumi's dynamic provider server (`pulumi.dynamic.__main__`, what `pulumi up`, `refresh` and
`destroy` run for a Python dynamic resource), called in this process as the engine calls it.

The module starts its gRPC server when imported, so it is loaded from its source without that
last call. Its handlers are then the SDK's own: the state's properties cross the wire as the
engine sends them (protobuf, every number a double), the provider is unpickled by its
`get_provider` (dill, from the property `__provider`), and the outputs come back with
`__provider` added, as the state records them. Each call runs in a context of its own, since
`get_provider` sets Pulumi's settings.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import types
from pathlib import Path
from typing import Any

from pulumi.runtime import proto, rpc

PROVIDER_KEY = "__provider"
_server: types.ModuleType | None = None


def server() -> types.ModuleType:
    global _server
    if _server is None:
        origin = importlib.util.find_spec("pulumi.dynamic.__main__").origin
        source = Path(origin).read_text(encoding="utf-8")
        body, sep, _ = source.rpartition("\nmain()\n")
        assert sep, f"{origin} no longer ends by calling main(): read it again"
        module = types.ModuleType("pulumi_dynamic_server")
        module.__file__ = origin
        exec(compile(body, origin, "exec"), module.__dict__)
        _server = module
    return _server


class _Context:
    """The gRPC context: the handlers abort with the provider's traceback on an exception."""

    def abort(self, code, details):
        raise ProviderFailed(details)

    def set_code(self, code):
        pass

    def set_details(self, details):
        pass


class ProviderFailed(Exception):
    """The provider raised: the message is the traceback the engine would show."""


def _wire(props: dict[str, Any]):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()


def _call(handler: str, request) -> Any:
    def run():
        servicer = server().DynamicResourceProviderServicer()
        return getattr(servicer, handler)(request, _Context())

    return contextvars.copy_context().run(run)


def forget_providers() -> None:
    """Empty the server's cache of unpickled providers (one per `__provider` value), so the
    next call unpickles again, as a new `pulumi` process does."""
    server()._PROVIDER_CACHE.clear()


def create(urn: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    done = _call("Create", proto.CreateRequest(urn=urn, properties=_wire(inputs)))
    return done.id, rpc.deserialize_properties(done.properties)


def read(urn: str, id_: str, outputs: dict[str, Any], inputs: dict[str, Any]):
    """`pulumi refresh`: (id, outputs) as the provider read them."""
    request = proto.ReadRequest(id=id_, urn=urn, properties=_wire(outputs), inputs=_wire(inputs))
    done = _call("Read", request)
    return done.id, rpc.deserialize_properties(done.properties)


def delete(urn: str, id_: str, outputs: dict[str, Any]) -> None:
    """`pulumi destroy` (or a replacement): the provider's delete, from the recorded outputs."""
    _call("Delete", proto.DeleteRequest(id=id_, urn=urn, properties=_wire(outputs)))


def diff(urn: str, id_: str, olds: dict[str, Any], news: dict[str, Any]):
    """`pulumi up` or `preview`: the DiffResponse for the recorded outputs and new inputs."""
    request = proto.DiffRequest(id=id_, urn=urn, olds=_wire(olds), news=_wire(news))
    return _call("Diff", request)
