"""An MCP server on the official Python SDK, over stdio, careless with its key: `$TOKEN` is in the
server's name and instructions, a tool's name, a tool's description and schema, a tool's error
result (`fail`), a JSON-RPC error (`refuse`) and a prompt's name. The tests of redaction run it."""
import os
from typing import Annotated

from pydantic import Field
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

key = os.environ["TOKEN"]
server = MCPServer(f"leaky-{key}", instructions=f"Use key {key}.")


def echo(message: Annotated[str, Field(description=f"Text to sign with key {key}")]) -> str:
    return message


def fail(message: str) -> str:
    raise ToolError(f"key {key} is not allowed here")


def refuse(message: str) -> str:
    raise MCPError(-32602, f"key {key} refused")


def lookup(message: str) -> str:
    return message


server.add_tool(echo, name="echo", description=f"Echoes its input (signed with key {key}).")
server.add_tool(fail, name="fail", description="Fails as a tool.")
server.add_tool(refuse, name="refuse", description="Refuses the call.")
server.add_tool(lookup, name=f"lookup_{key}", description="Named after the key.")


@server.prompt(name=f"greet_{key}")
def greet() -> str:
    return "Hello."


server.run()
