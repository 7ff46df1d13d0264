"""sans-IO MCP: JSON-RPC framing of messages, the two eras, request state, header rules."""
