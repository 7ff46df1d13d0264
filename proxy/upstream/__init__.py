"""The upstream side: MCP servers run as child processes or reached over HTTP."""
