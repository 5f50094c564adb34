"""An MCP server on the official Python SDK, over stdio, whose tool list is too large for one
message: `huge-tools-server.py TOOLS BYTES` offers TOOLS tools, each described in BYTES bytes."""
import sys

from mcp.server.mcpserver import MCPServer

count, size = int(sys.argv[1]), int(sys.argv[2])
server = MCPServer("huge-tools")


def tool(message: str) -> str:
    return message


for i in range(count):
    server.add_tool(tool, name=f"tool_{i}", description="x" * size)
server.run()
