"""An MCP server on the official Python SDK, over streamable HTTP: `py-server.py PORT`.

Tools: `echo` (answers its `message`). uvicorn prints `Uvicorn running on http://127.0.0.1:PORT`
to stderr once it serves.
"""
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

port = int(sys.argv[1])
server = MCPServer("steward-test-py-sdk")


@server.tool()
def echo(message: str) -> str:
    """Echoes its input."""
    return message


uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="info")
