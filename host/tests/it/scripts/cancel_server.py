"""An MCP server on the official Python SDK, over stdio, that counts the calls cancelled at it.

Tools: `wait` (reports progress 0 of 1, then waits until cancelled), `cancelled` (how many
`wait` calls were cancelled so far, as text), `roots` (asks the client for its roots during the
call and answers their URIs, one a line).
"""
import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("steward-test-cancel")
cancelled = 0


@server.tool()
async def wait(ctx: Context) -> str:
    """Waits until cancelled."""
    global cancelled
    await ctx.report_progress(0, 1, "waiting")
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        cancelled += 1
        raise
    return "never"


@server.tool(name="cancelled")
def count() -> str:
    """How many `wait` calls were cancelled."""
    return str(cancelled)


@server.tool()
async def roots(ctx: Context) -> str:
    """Asks the client for its roots and answers their URIs."""
    listed = await ctx.session.list_roots()
    return "\n".join(str(r.uri) for r in listed.roots)


server.run()
