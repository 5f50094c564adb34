"""The official Python MCP client against Steward's /mcp, for the pass-through tests.

Usage: passthru_client.py URL MODE TOOL [ARGS_JSON]
  progress: calls TOOL with a progress callback; prints {"progress": [...], "result": {...}}.
  cancel:   calls TOOL, cancels it once its first progress arrived; prints {"progress": [...],
            "cancelled": true}.
  follow:   calls TOOL, printing {"progress": ...} for each progress as it arrives, then
            {"result": {...}} or {"error": "..."}.
  list:     prints {"tools": [...]} (TOOL is ignored).
  raw:      calls TOOL; prints {"result": {...}} or {"error": "..."}.
Every line printed is one JSON object.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, mode, tool = sys.argv[1], sys.argv[2], sys.argv[3]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
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
