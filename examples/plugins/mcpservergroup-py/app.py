"""The `mcpservergroup-py` Steward plugin: kind `MCPServerGroup`, written in Python.

A group selects the MCPServers of its namespace by labels and reports which
of them are ready and which tools they offer together. It is the same kind as
the Rust plugin `plugins/mcpservergroup`, answer for answer; it exists to show
that the WIT contract (`wit/plugin.wit`) does not care what a plugin is written in.

Build it with componentize-py (see README.md); the bindings module `wit_world`
is generated at build time from the WIT files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.steward_plugin_types import (
    Condition,
    ConditionStatus,
    FieldError,
    KindInfo,
    LogLevel,
    PluginInfo,
    ReconcileError_Fatal,
    ReconcileError_Invalid,
    Request,
    Resource,
    Response,
)

PLUGIN_NAME = "mcpservergroup-py"
PLUGIN_VERSION = "0.1.0"
GROUP = "steward.dev"
VERSION = "v1alpha1"
KIND = "MCPServerGroup"
PLURAL = "mcpservergroups"
MEMBER_KIND = "MCPServer"

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
READY_STATES = ("Running", "Connected")

SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A set of MCPServers of the group's namespace, chosen by labels, and the tools they must offer together.",
    "properties": {
        "selector": {
            "type": "object",
            "description": "Which MCPServers of the namespace belong to the group; absent or empty selects them all.",
            "properties": {
                "matchLabels": {
                    "type": "object",
                    "description": "Labels a member must carry, each with exactly this value.",
                    "additionalProperties": {"type": "string"},
                },
                "matchExpressions": {
                    "type": "array",
                    "description": "Label requirements a member must meet, all of them.",
                    "items": {
                        "type": "object",
                        "required": ["key", "operator"],
                        "properties": {
                            "key": {"type": "string", "description": "The label key."},
                            "operator": {
                                "type": "string",
                                "description": "In and NotIn compare the label's value with `values`; Exists and DoesNotExist test the key alone.",
                                "enum": list(OPERATORS),
                            },
                            "values": {
                                "type": "array",
                                "description": "The values of In and NotIn (at least one); empty for Exists and DoesNotExist.",
                                "items": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
        "requiredTools": {
            "type": "array",
            "description": "Tools that ready members must offer between them for the group to be Ready.",
            "items": {"type": "string"},
        },
    },
}


class SpecError(Exception):
    """A spec that does not have the shape of an MCPServerGroup spec; stops parsing at the first one."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass
class Requirement:
    """One `matchExpressions` entry; `operator` is one of `OPERATORS`."""

    key: str
    operator: str
    values: list[str]


@dataclass
class Spec:
    """The parsed spec of an MCPServerGroup."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: list[Requirement] = field(default_factory=list)
    required_tools: list[str] = field(default_factory=list)


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _expect(v: Any, kind: type, what: str, path: str) -> Any:
    """`v` when it is a `kind` (dict, list or str), else the type error at `path`."""
    if not isinstance(v, kind):
        raise SpecError(path, f"invalid type: {_type_name(v)}, expected {what}")
    return v


def _string_list(v: Any, path: str) -> list[str]:
    items = _expect(v, list, "an array of strings", path)
    return [_expect(s, str, "a string", f"{path}[{i}]") for i, s in enumerate(items)]


def parse_spec(text: str) -> Spec:
    """Parses the spec JSON text as the Rust plugin's serde does.

    Fields are read in the order they are written and parsing stops at the
    first wrong type; unknown fields are ignored; an optional field may be
    left out but not given as `null`.
    """
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise SpecError("spec", f"not JSON: {e}") from None
    spec = Spec()
    for name, value in _expect(raw, dict, "an object", "spec").items():
        if name == "selector":
            _parse_selector(value, spec, "spec.selector")
        elif name == "requiredTools":
            spec.required_tools = _string_list(value, "spec.requiredTools")
    return spec


def _parse_selector(value: Any, spec: Spec, at: str) -> None:
    for name, v in _expect(value, dict, "an object", at).items():
        if name == "matchLabels":
            labels = _expect(v, dict, "an object of strings", f"{at}.matchLabels")
            spec.match_labels = {k: _expect(s, str, "a string", f"{at}.matchLabels.{k}") for k, s in labels.items()}
        elif name == "matchExpressions":
            exprs = _expect(v, list, "an array", f"{at}.matchExpressions")
            spec.match_expressions = [_parse_requirement(e, f"{at}.matchExpressions[{i}]") for i, e in enumerate(exprs)]


def _parse_requirement(value: Any, at: str) -> Requirement:
    key: Optional[str] = None
    operator: Optional[str] = None
    values: list[str] = []
    for name, v in _expect(value, dict, "an object", at).items():
        if name == "key":
            key = _expect(v, str, "a string", f"{at}.key")
        elif name == "operator":
            operator = _expect(v, str, "a string", f"{at}.operator")
            if operator not in OPERATORS:
                raise SpecError(f"{at}.operator", f"unknown operator `{operator}`, expected one of {', '.join(OPERATORS)}")
        elif name == "values":
            values = _string_list(v, f"{at}.values")
    if key is None:
        raise SpecError(at, "missing field `key`")
    if operator is None:
        raise SpecError(at, "missing field `operator`")
    return Requirement(key, operator, values)


def check_spec(spec: Spec) -> list[FieldError]:
    """The rule violations of a well-typed spec, each at its field's path, in field order."""
    errs: list[FieldError] = []
    if any(k.strip() == "" for k in spec.match_labels):
        errs.append(FieldError("spec.selector.matchLabels", "a label key must not be empty"))
    for i, e in enumerate(spec.match_expressions):
        at = f"spec.selector.matchExpressions[{i}]"
        if e.key.strip() == "":
            errs.append(FieldError(f"{at}.key", "the label key must not be empty"))
        if e.operator in ("In", "NotIn") and not e.values:
            errs.append(FieldError(f"{at}.values", f"{e.operator} needs at least one value; use Exists or DoesNotExist to test for the key alone"))
        elif e.operator in ("Exists", "DoesNotExist") and e.values:
            errs.append(FieldError(f"{at}.values", f"{e.operator} takes no values; use In or NotIn to test the value"))
    seen: set[str] = set()
    for i, t in enumerate(spec.required_tools):
        if t.strip() == "":
            errs.append(FieldError(f"spec.requiredTools[{i}]", "a tool name must not be empty"))
        elif t in seen:
            errs.append(FieldError(f"spec.requiredTools[{i}]", f"`{t}` is listed twice"))
        seen.add(t)
    return errs


def validate_resource(resource: Resource) -> tuple[Optional[Spec], list[FieldError]]:
    """The parsed spec when it is valid, and every field error otherwise."""
    if resource.kind != KIND:
        return None, [FieldError("kind", f"plugin {PLUGIN_NAME} does not reconcile kind {resource.kind} (it has: {KIND})")]
    try:
        spec = parse_spec(resource.spec)
    except SpecError as e:
        return None, [FieldError(e.path, e.message)]
    errs = check_spec(spec)
    return (None if errs else spec), errs


def selects(spec: Spec, labels: dict[str, str]) -> bool:
    """Whether an object with `labels` meets every label requirement of the selector."""
    for k, v in spec.match_labels.items():
        if labels.get(k) != v:
            return False
    for e in spec.match_expressions:
        value = labels.get(e.key)
        if e.operator == "In" and (value is None or value not in e.values):
            return False
        if e.operator == "NotIn" and value is not None and value in e.values:
            return False
        if e.operator == "Exists" and value is None:
            return False
        if e.operator == "DoesNotExist" and value is not None:
            return False
    return True


@dataclass
class Member:
    """What the group reports of one selected MCPServer."""

    name: str
    ready: bool
    state: str
    tools: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ready": self.ready, "state": self.state, "toolCount": len(self.tools) if self.ready else 0}


def member(server: Resource) -> Member:
    """Reads a server's last status; absent or unparseable status is not ready, state `Unknown`."""
    status: Any = None
    if server.status is not None:
        try:
            status = json.loads(server.status)
        except ValueError:
            status = None
    if not isinstance(status, dict):
        return Member(server.name, False, "Unknown", [])
    state = status.get("state")
    state = state if isinstance(state, str) else "Unknown"
    ready = state in READY_STATES and status.get("health") == "Healthy"
    raw_tools = status.get("tools")
    tools = [t for t in raw_tools if isinstance(t, str)] if isinstance(raw_tools, list) else []
    return Member(server.name, ready, state, tools)


def outcome(spec: Spec, namespace: str, servers: list[Resource]) -> tuple[dict[str, Any], Condition]:
    """The status and the Ready condition of a group over the MCPServers of its namespace."""
    chosen = sorted((s for s in servers if selects(spec, {kv.key: kv.value for kv in s.labels})), key=lambda s: s.name)
    members = [member(s) for s in chosen]
    ready = [m for m in members if m.ready]
    tools = sorted({t for m in ready for t in m.tools})
    offered = set(tools)
    missing = sorted({t for t in spec.required_tools if t not in offered})
    status = {
        "selected": len(members),
        "ready": len(ready),
        "members": [m.to_json() for m in members],
        "tools": tools,
        "missingTools": missing,
    }
    if not members:
        cond = _ready(False, "NoServersSelected", f"no MCPServer in namespace {namespace} matches the selector")
    elif not ready:
        cond = _ready(False, "NoServersReady", f"none of the {len(members)} selected MCPServers is ready")
    elif missing:
        cond = _ready(False, "ToolsMissing", f"no ready member offers: {', '.join(missing)}")
    else:
        cond = _ready(
            True,
            "ServersReady",
            f"{len(ready)} of {len(members)} selected MCPServers are ready, offering {len(tools)} tools",
        )
    return status, cond


def _ready(holds: bool, reason: str, message: str) -> Condition:
    return Condition("Ready", ConditionStatus.TRUE if holds else ConditionStatus.FALSE, reason, message)


def _response(status: dict[str, Any], conditions: list[Condition]) -> Response:
    return Response(json.dumps(status, separators=(",", ":")), conditions, [], None, [])


class Reconciler(exports.Reconciler):
    """The exported `reconciler` interface of `wit/plugin.wit`."""

    def describe(self) -> PluginInfo:
        kind = KindInfo(GROUP, VERSION, KIND, PLURAL, True, json.dumps(SPEC_SCHEMA, separators=(",", ":")), 0)
        return PluginInfo(PLUGIN_NAME, PLUGIN_VERSION, [kind], [])

    def validate(self, resource: Resource) -> list[FieldError]:
        return validate_resource(resource)[1]

    def reconcile(self, request: Request) -> Response:
        obj = request.resource
        if obj.kind != KIND:
            raise Err(ReconcileError_Fatal(f"plugin {PLUGIN_NAME} does not reconcile kind {obj.kind} (it has: {KIND})"))
        spec, errs = validate_resource(obj)
        if spec is None:
            raise Err(ReconcileError_Invalid(errs))
        servers = host.list(MEMBER_KIND, obj.namespace)
        status, cond = outcome(spec, obj.namespace, servers)
        host.log(LogLevel.DEBUG, f"selected {status['selected']}, ready {status['ready']}")
        return _response(status, [cond])

    def finalize(self, request: Request) -> Response:
        # The group owns nothing: there is nothing to clean up. Like the Rust SDK's
        # default finalizer, keep the last status as it is.
        return Response(request.resource.status or "{}", [], [], None, [])
