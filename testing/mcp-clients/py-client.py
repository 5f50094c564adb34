"""The official Python MCP client (the `mcp` package of testing/mcp-servers' venv), scripted.

Usage: `py-client.py URL STEPS`, where STEPS is a JSON array of steps, each `["list"]`
(`tools/list`, every page) or `["call", NAME, ARGUMENTS]` (`tools/call`). Prints one JSON
array with, for each step, the result as the SDK read it (the protocol's field names), or
`{"error": WORDS}` when the server answered with an MCP error.
"""
import asyncio
import json
import sys

from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(url, steps):
    out = []
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for step in steps:
                try:
                    if step[0] == "list":
                        tools, cursor = [], None
                        while True:
                            page = await session.list_tools(
                                params=None if cursor is None else {"cursor": cursor}
                            )
                            tools.extend(dump(t) for t in page.tools)
                            cursor = page.next_cursor
                            if not cursor:
                                break
                        out.append({"tools": tools})
                    elif step[0] == "call":
                        out.append(dump(await session.call_tool(step[1], step[2] if len(step) > 2 else None)))
                    else:
                        raise SystemExit(f"unknown step {step[0]!r}: expected list or call")
                except MCPError as e:
                    out.append({"error": str(e)})
    print(json.dumps(out))


asyncio.run(run(sys.argv[1], json.loads(sys.argv[2])))
