"""The official Python MCP client against Steward's /mcp, for the pass-through tests.

Usage: passthru_client.py URL MODE TOOL [ARGS_JSON]
  progress: calls TOOL with a progress callback; prints {"progress": [...], "result": {...}}.
  cancel:   calls TOOL, cancels it once its first progress arrived; prints {"progress": [...],
            "cancelled": true}.
  follow:   calls TOOL, printing {"progress": ...} for each progress as it arrives, then
            {"result": {...}} or {"error": "..."}.
  ask:      declares sampling, elicitation and roots (answering with fixed values) and calls
            each tool named in ARGS_JSON (a list of [tool, arguments]); prints {"asked": [...
            the requests it answered], "results": {tool: result or {"error": ...}}} (TOOL ignored).
  list:     prints {"tools": [...]} (TOOL is ignored).
  raw:      calls TOOL; prints {"result": {...}} or {"error": "..."}.
Every line printed is one JSON object.
"""

import json
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, mode, tool = sys.argv[1], sys.argv[2], sys.argv[3]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    asked: list[str] = []

    async def sampling(context, params):  # noqa: ANN001, ARG001 - the SDK's callback shape
        asked.append("sampling/createMessage")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled-by-the-client"), model="test"
        )

    async def elicitation(context, params):  # noqa: ANN001, ARG001
        asked.append("elicitation/create")
        return types.ElicitResult(action="accept", content={"name": "elicited-name"})

    async def roots(context):  # noqa: ANN001, ARG001
        asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri="file:///client-root", name="client-root")])

    callbacks = (
        {"sampling_callback": sampling, "elicitation_callback": elicitation, "list_roots_callback": roots}
        if mode == "ask"
        else {}
    )
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, **callbacks) as session:
            await session.initialize()
            got: list[dict] = []
            first = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                got.append({"progress": progress, "total": total, "message": message})
                first.set()

            if mode == "progress":
                result = await session.call_tool(tool, args, progress_callback=on_progress)
                print(json.dumps({"progress": got, "result": result.model_dump(mode="json", by_alias=True)}))
            elif mode == "cancel":
                outcome: dict = {}

                async def call() -> None:
                    try:
                        r = await session.call_tool(tool, args, progress_callback=on_progress)
                        outcome["result"] = r.model_dump(mode="json", by_alias=True)
                    except anyio.get_cancelled_exc_class():
                        outcome["cancelled"] = True
                        raise

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await first.wait()
                    tg.cancel_scope.cancel()
                outcome["progress"] = got
                print(json.dumps(outcome))
            elif mode == "ask":
                results = {}
                for name, arguments in args:
                    try:
                        r = await session.call_tool(name, arguments)
                        results[name] = r.model_dump(mode="json", by_alias=True)
                    except Exception as e:  # noqa: BLE001 - the test reads what failed
                        results[name] = {"error": str(e)}
                print(json.dumps({"asked": asked, "results": results}))
            elif mode == "list":
                listed = await session.list_tools()
                print(json.dumps({"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]}))
            elif mode == "raw":
                try:
                    r = await session.call_tool(tool, args)
                    print(json.dumps({"result": r.model_dump(mode="json", by_alias=True)}))
                except Exception as e:  # noqa: BLE001 - the test reads what failed
                    print(json.dumps({"error": str(e)}))
            elif mode == "follow":

                async def shown(progress: float, total: float | None, message: str | None) -> None:
                    print(json.dumps({"progress": progress, "total": total, "message": message}), flush=True)

                try:
                    r = await session.call_tool(tool, args, progress_callback=shown)
                    print(json.dumps({"result": r.model_dump(mode="json", by_alias=True)}), flush=True)
                except Exception as e:  # noqa: BLE001 - the test reads what failed
                    print(json.dumps({"error": str(e)}), flush=True)
            else:
                raise SystemExit(f"unknown mode {mode!r}")


anyio.run(main)
