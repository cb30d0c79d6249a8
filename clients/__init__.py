"""simia's clients: agents and rollouts that drive episodes over MCP."""
