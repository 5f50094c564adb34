"""The `stdioserver-py` Steward plugin: kind `StdioServer` (`example.dev/v1alpha1`), in Python.

Each object asks the host to run one stdio MCP server (`spec.command` with `spec.args` and
`spec.env`) and reports what the host observes of it: its phase, process id, restarts and
tools, and a `Ready` condition while it runs. Deleting the object stops the process. It is
the Python twin of the TypeScript `stdioserver-ts`, answer for answer (both pass
`examples/plugins/stdioserver-ts/scenarios/stdioserver.yaml`), and shows a Python plugin
using a capability: it declares `services`, reads `services.observed()` and hands the
service it wants to `services.set_desired`. The host config grants it
(`plugins.stdioserver-py.capabilities: [services]`).

Build it with componentize-py for the world `plugin-full` (see README.md); the bindings
module `wit_world` is generated at build time from the WIT files.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import services
from wit_world.imports.steward_plugin_types import (
    Condition,
    ConditionStatus,
    FieldError,
    KeyValue,
    KindInfo,
    PluginInfo,
    ReconcileError_Fatal,
    ReconcileError_Invalid,
    Request,
    Resource,
    Response,
    ServicePhase,
    ServiceSpec,
    ServiceStatus,
    Transport,
)

PLUGIN_NAME = "stdioserver-py"
PLUGIN_VERSION = "0.1.0"
GROUP = "example.dev"
VERSION = "v1alpha1"
KIND = "StdioServer"
PLURAL = "stdioservers"
SERVICE = "server"
# How long the host waits for each answer of the server (the SDKs' default).
TIMEOUT_MS = 10_000

SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One MCP server process the host runs and speaks to over stdin and stdout.",
    "required": ["command"],
    "properties": {
        "command": {"type": "string", "description": "The program to run."},
        "args": {"type": "array", "description": "Its arguments.", "items": {"type": "string"}},
        "env": {
            "type": "object",
            "description": "Extra environment variables of the process.",
            "additionalProperties": {"type": "string"},
        },
    },
}


def parse_spec(resource: Resource) -> tuple[Optional[dict[str, Any]], list[FieldError]]:
    """The spec, or the problems with it, each naming its field."""
    try:
        spec = json.loads(resource.spec or "{}")
    except ValueError as e:
        return None, [FieldError("spec", f"not JSON: {e}")]
    if not isinstance(spec, dict):
        return None, [FieldError("spec", "must be an object")]
    errors: list[FieldError] = []
    command = spec.get("command")
    if not isinstance(command, str):
        errors.append(FieldError("spec.command", "required, a string"))
    elif command.strip() == "":
        errors.append(FieldError("spec.command", "the command must not be empty"))
    args = spec.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        errors.append(FieldError("spec.args", "must be a list of strings"))
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        errors.append(FieldError("spec.env", "must map names to strings"))
    return (None, errors) if errors else (spec, [])


def phase_name(phase: ServicePhase) -> str:
    """`RUNNING` as the status shows it: `Running`."""
    return phase.name.capitalize()


def outcome(observed: Optional[ServiceStatus]) -> tuple[dict[str, Any], Condition]:
    """The status and the Ready condition of an object whose service is `observed` (None: not yet)."""
    status: dict[str, Any] = {
        "state": phase_name(observed.phase) if observed else "Pending",
        "restarts": observed.restarts if observed else 0,
        "tools": sorted(t.name for t in observed.tools) if observed else [],
    }
    if observed and observed.pid is not None:
        status["pid"] = observed.pid
    if observed and observed.message is not None:
        status["message"] = observed.message
    if observed and observed.phase == ServicePhase.RUNNING:
        cond = Condition("Ready", ConditionStatus.TRUE, "Running", f"the server runs with {len(status['tools'])} tools")
    else:
        reason = "NotRunning" if observed else "Starting"
        message = (observed.message if observed else None) or "the server is not running yet"
        cond = Condition("Ready", ConditionStatus.FALSE, reason, message)
    return status, cond


def desired(spec: dict[str, Any]) -> services.DesiredService:
    """The one service an object wants: its command, as a stdio MCP server."""
    env = [KeyValue(k, v) for k, v in sorted(spec.get("env", {}).items())]
    service = ServiceSpec(SERVICE, Transport.STDIO, spec["command"], list(spec.get("args", [])), env, None, None, [], TIMEOUT_MS)
    return services.DesiredService(service, [])


class Reconciler(exports.Reconciler):
    """The exported `reconciler` interface of `wit/plugin.wit`."""

    def describe(self) -> PluginInfo:
        kind = KindInfo(GROUP, VERSION, KIND, PLURAL, True, json.dumps(SPEC_SCHEMA, separators=(",", ":")), 0)
        return PluginInfo(PLUGIN_NAME, PLUGIN_VERSION, [kind], ["services"])

    def validate(self, resource: Resource) -> list[FieldError]:
        return parse_spec(resource)[1]

    def reconcile(self, request: Request) -> Response:
        obj = request.resource
        if obj.kind != KIND:
            raise Err(ReconcileError_Fatal(f"plugin {PLUGIN_NAME} does not reconcile kind {obj.kind} (it has: {KIND})"))
        spec, errs = parse_spec(obj)
        if spec is None:
            raise Err(ReconcileError_Invalid(errs))
        observed = next((o.status for o in services.observed() if o.status.name == SERVICE), None)
        status, cond = outcome(observed)
        services.set_desired([desired(spec)])
        return Response(json.dumps(status, separators=(",", ":")), [cond], [], None, [])

    def finalize(self, request: Request) -> Response:
        # No service is wanted any more: the host stops the process. The last status stays.
        services.set_desired([])
        return Response(request.resource.status or "{}", [], [], None, [])
