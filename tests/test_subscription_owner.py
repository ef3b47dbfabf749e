"""The Session owns subscription state: outside its owners (gateway/protocol/session.py and
gateway/protocol/subscription.py) no gateway module assigns a field of a ``Subscription``, mutates
its buffer, or writes into the session's subscription maps — other modules ask the Session for a
transition (``add_subscription``, ``buffer``, ``position``, ``go_live``, ``extend_subscription``,
``update_channel_info``, ``remove_subscription``, ``clear_subscriptions``).

Checked on the source with ``ast``: a store (``=``, ``+=``, annotated, ``del``, ``setattr``) to an
attribute named like a ``Subscription`` field on anything but ``self`` (a class's own attributes
are its own), a mutating call on a ``.buffer``, and a store into or a mutating call on a
``.subscriptions`` / ``.namespace_counts`` map. A module writing generated protobuf messages, whose
fields share those names, is exempt by name with its reason."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from gateway.protocol.subscription import Subscription

ROOT = Path(__file__).resolve().parent.parent
OWNERS = {"gateway/protocol/session.py", "gateway/protocol/subscription.py"}
EXEMPT = {
    "gateway/protocol/protobuf/codec.py": "fills client_pb2 messages (SubscribeResult.offset, …)",
    "gateway/protocol/protobuf/replies.py": "fills client_pb2 messages (SubscribeResult.offset, …)",
}
FIELDS = frozenset(f.name for f in dataclasses.fields(Subscription))
MAPS = frozenset({"subscriptions", "namespace_counts"})
MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "popitem", "clear", "remove", "update", "setdefault", "__setitem__"}
)


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _stores(target: ast.expr) -> list[ast.expr]:
    """The attribute and subscript targets of one assignment target (tuples unpacked)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [t for elt in target.elts for t in _stores(elt)]
    if isinstance(target, ast.Starred):
        return _stores(target.value)
    return [target]


def _map_name(node: ast.expr) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) and node.attr in MAPS else None


def _target_writes(target: ast.expr) -> str | None:
    if isinstance(target, ast.Attribute) and target.attr in FIELDS and not _is_self(target.value):
        return f"assigns .{target.attr}"
    if isinstance(target, ast.Subscript):
        if name := _map_name(target.value):
            return f"writes into .{name}"
        if isinstance(target.value, ast.Attribute) and target.value.attr == "buffer":
            return "writes into .buffer"
    return None


def _call_writes(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
        name = node.args[1]
        if isinstance(name, ast.Constant) and name.value in FIELDS and not _is_self(node.args[0]):
            return f"setattr .{name.value}"
    if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
        owner = func.value
        if isinstance(owner, ast.Attribute) and owner.attr == "buffer":
            return f"mutates .buffer ({func.attr})"
        if name := _map_name(owner):
            return f"mutates .{name} ({func.attr})"
    return None


def violations(source: str, path: str) -> list[str]:
    """Where ``source`` (the module at ``path``) writes subscription state, in source order."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = [t for target in node.targets for t in _stores(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = _stores(node.target)
        what = [(t, _target_writes(t)) for t in targets]
        if isinstance(node, ast.Call):
            what.append((node, _call_writes(node)))
        found += [(w.lineno, w.col_offset, f"{path}:{w.lineno}: {kind}") for w, kind in what if kind]
    return [line for *_, line in sorted(found)]


def _gateway_modules() -> list[Path]:
    return sorted((ROOT / "gateway").rglob("*.py"))


def test_only_the_session_writes_subscription_state() -> None:
    found = []
    for file in _gateway_modules():
        path = file.relative_to(ROOT).as_posix()
        if (
            path in OWNERS
            or path in EXEMPT
            or file.name.endswith("_pb2.py")
            or file.name.endswith("_pb2_grpc.py")
        ):
            continue
        found += violations(file.read_text(), path)
    assert found == [], "ask the Session for a transition instead:\n" + "\n".join(found)


def test_the_owners_and_exemptions_exist() -> None:
    for path in (*OWNERS, *EXEMPT):
        assert (ROOT / path).is_file(), path


def test_the_check_sees_each_kind_of_write() -> None:
    source = """
def f(sub, stream, session, self):
    sub.state = 1
    stream.sub.offset += 1
    buffered, sub.buffer = sub.buffer, []
    sub.expire_at: float = 2.0
    del sub.chan_info
    setattr(sub, "epoch", "e")
    sub.buffer.append(3)
    sub.buffer[0] = 4
    session.subscriptions["c"] = sub
    del session.subscriptions["c"]
    session.subscriptions.pop("c")
    session.namespace_counts.clear()
    self.state = 5              # a class's own attribute
    request.channels = []       # not a subscription field
    session.subscriptions.get("c")
"""
    found = violations(source, "m.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        "assigns .state",
        "assigns .offset",
        "assigns .buffer",
        "assigns .expire_at",
        "assigns .chan_info",
        "setattr .epoch",
        "mutates .buffer (append)",
        "writes into .buffer",
        "writes into .subscriptions",
        "writes into .subscriptions",
        "mutates .subscriptions (pop)",
        "mutates .namespace_counts (clear)",
    ]


REACH_THROUGH = frozenset({"session", "send_queue", "node", "subscriptions", "authorizer"})


def reach_throughs(source: str) -> list[str]:
    """The connection internals ``source`` names as attributes (``x.session``, ``x.node``, …)."""
    found = [
        (node.lineno, node.attr)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr in REACH_THROUGH
    ]
    return [f"{line}: .{attr}" for line, attr in sorted(found)]


def test_proxy_streams_reach_the_connection_only_through_its_narrow_protocol() -> None:
    """gateway/connection/proxy_streams.py keeps the backend streams and nothing else: it gets
    the proxies at construction and reaches its connection through ``StreamConn`` (who asks,
    ``send``, ``spawn``, ``unsubscribe``), never its Session, send queue, node or authorizer."""
    source = (ROOT / "gateway/connection/proxy_streams.py").read_text()
    assert reach_throughs(source) == []
    assert reach_throughs("client.session.add_subscription(sub)\nclient.node.presence") == [
        "1: .session",
        "2: .node",
    ]
