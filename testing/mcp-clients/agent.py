"""An MCP client driven over stdin, on the official Python SDK: one JSON request a line in, one JSON answer a line out.

Usage: agent.py http URL        (streamable HTTP, e.g. Steward's /mcp)
       agent.py stdio CMD ARG…  (a server run as a child)

Requests: {"op": "prompts"} | {"op": "resources"} | {"op": "templates"} |
{"op": "read", "uri": U} | {"op": "get_prompt", "name": N, "arguments": {…}} |
{"op": "subscribe", "uri": U} | {"op": "unsubscribe", "uri": U} |
{"op": "call", "name": N, "arguments": {…}} | {"op": "events"} (the notifications
received since the last "events": [{"method": M, "uri": U?}]) | {"op": "capabilities"}.
An answer is {"ok": RESULT} or {"error": TEXT}.
"""

import json
import warnings
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

warnings.filterwarnings("ignore")  # resources/subscribe is what the servers speak today

events = []


async def on_message(message):
    method = getattr(message, "method", None)
    if method is None:
        return
    params = getattr(message, "params", None)
    uri = getattr(params, "uri", None) if params is not None else None
    events.append({"method": method, "uri": None if uri is None else str(uri)})


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def answer(session, req):
    op = req["op"]
    if op == "prompts":
        return dump(await session.list_prompts())["prompts"]
    if op == "resources":
        return dump(await session.list_resources())["resources"]
    if op == "templates":
        return dump(await session.list_resource_templates())["resourceTemplates"]
    if op == "read":
        return dump(await session.read_resource(req["uri"]))["contents"]
    if op == "get_prompt":
        return dump(await session.get_prompt(req["name"], req.get("arguments")))
    if op == "subscribe":
        await session.subscribe_resource(req["uri"])
        return {}
    if op == "unsubscribe":
        await session.unsubscribe_resource(req["uri"])
        return {}
    if op == "call":
        return dump(await session.call_tool(req["name"], req.get("arguments") or {}))
    if op == "events":
        got = list(events)
        events.clear()
        return got
    if op == "capabilities":
        return dump(session.server_capabilities) if hasattr(session, "server_capabilities") else None
    raise ValueError(f"unknown op {op!r}")


async def serve(session):
    lines = anyio.wrap_file(sys.stdin)
    async for line in lines:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            out = {"ok": await answer(session, req)}
        except Exception as e:  # every failure goes back to the test, in words
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)


async def main():
    kind = sys.argv[1]
    if kind == "http":
        transport = streamable_http_client(sys.argv[2])
    else:
        transport = stdio_client(StdioServerParameters(command=sys.argv[2], args=sys.argv[3:]))
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            print(json.dumps({"ok": dump(init.capabilities)}), flush=True)
            await serve(session)


anyio.run(main)
