"""What can go wrong between the proxy and its peers, by what the caller can do about it.

    ProxyError
    ├── UpstreamError              the upstream could not answer this request
    │   ├── UpstreamDown           its process died or could not be started, or its server
    │   │                          cannot be reached; retry later
    │   └── UpstreamTimeout        it did not answer within the deadline
    └── BridgeError                the two eras could not be bridged for this request
                                   (a capability the client lacks, a bad requestState)

Protocol faults of the client's own making are `jsonrpc.MessageError`s and are answered with
JSON-RPC errors; everything here becomes an error the client can read and act on.
"""

from __future__ import annotations


class ProxyError(Exception):
    """Base of the proxy's own errors; the message is safe to show to the client."""


class UpstreamError(ProxyError):
    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # the server's Retry-After, in seconds, when it gave one
        self.permanent = permanent  # retrying cannot help (refused credentials, say)


class UpstreamDown(UpstreamError):
    def __init__(
        self,
        name: str,
        reason: str,
        stderr_tail: list[str],
        retry_in: float | None = None,
        *,
        verb: str = "restarts",
    ) -> None:
        text = f"upstream {name!r} is down: {reason}"
        if stderr_tail:
            text += ": " + " | ".join(stderr_tail[-3:])
        # What went wrong alone, for a caller that will not retry (the wrap form exits on it).
        self.without_retry = text
        if retry_in is not None and retry_in > 0:
            text += f"; it {verb} on the next request, in {retry_in:.1f} s at the earliest"
        else:
            text += f"; it {verb} on the next request"
        super().__init__(text)
        self.name = name
        self.reason = reason
        self.stderr_tail = stderr_tail


class UpstreamTimeout(UpstreamError):
    pass


class BridgeError(ProxyError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
