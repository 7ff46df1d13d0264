"""The error tree: what a caller can catch, and the messages a client is shown."""

from __future__ import annotations

from frugal_proxy.errors import BridgeError, ProxyError, UpstreamDown, UpstreamError, UpstreamTimeout


def test_the_tree_is_what_the_module_draws() -> None:
    assert issubclass(UpstreamDown, UpstreamError) and issubclass(UpstreamTimeout, UpstreamError)
    assert issubclass(UpstreamError, ProxyError) and issubclass(BridgeError, ProxyError)
    assert not issubclass(BridgeError, UpstreamError)


def test_an_upstream_error_keeps_what_retrying_needs() -> None:
    plain = UpstreamError("refused")
    assert (plain.retry_after, plain.permanent) == (None, False)
    limited = UpstreamError("slow down", retry_after=2.5, permanent=True)
    assert (str(limited), limited.retry_after, limited.permanent) == ("slow down", 2.5, True)
    assert BridgeError("no roots", -32021).code == -32021


def test_a_down_upstream_says_why_with_its_last_words_and_when_it_comes_back() -> None:
    down = UpstreamDown("notes", "exit status 1", ["a", "b", "c", "Traceback: boom"], retry_in=2.04)
    assert str(down) == (
        "upstream 'notes' is down: exit status 1: b | c | Traceback: boom; "
        "it restarts on the next request, in 2.0 s at the earliest"
    )
    assert (down.name, down.reason, down.stderr_tail[-1]) == ("notes", "exit status 1", "Traceback: boom")
    quiet = UpstreamDown("web", "connection refused", [], verb="reconnects")
    assert str(quiet) == "upstream 'web' is down: connection refused; it reconnects on the next request"
