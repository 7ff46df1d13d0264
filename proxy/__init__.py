"""frugal-proxy: a transparent MCP proxy that routes every tool call by policy and governs its result."""

__version__ = "0.1.0"
