"""Transports move framed JSON-RPC messages; they know nothing of MCP.

ByteSource / ByteSink     the byte pipes (our stdin/stdout, a child's stdout/stdin)
FrameReader               ByteSource + LineFramer -> frames, bad lines as events
FrameWriter               frames -> one line each, writes serialised by a lock
"""
