"""A tiny MCP server over stdio for the agent tests: ``python -m tests.support.mcp_server``.

Tools: ``add(a, b) -> a + b``. It is the outside world of an agent's MCP toolset; each
agent run that uses the toolset starts it as a subprocess of the worker.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentops-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


if __name__ == "__main__":
    server.run("stdio")
