"""`frugal-proxy mcp install`: MCP clients' config files and how to edit them."""
