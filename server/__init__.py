"""simia's MCP server: worlds as MCP endpoints, the HTTP API and the `simia` CLI."""
