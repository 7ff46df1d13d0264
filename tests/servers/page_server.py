"""Web pages on 127.0.0.1 for the local extractor and the local browser (run in a thread of the
test process; drivers reach them by URL).

    /article            a readable article: title, headings, paragraphs, a list, a link
    /js-only            an empty shell whose text only JavaScript writes (a browser reads it,
                        a fetch-and-extract reads nothing)
    /late               JavaScript adds <div id="late"> 300 ms after load
    /empty              navigation and a footer, no readable text
    /redirect/<n>       302 to /redirect/<n-1>; /redirect/0 to /article
    /to?location=<url>  302 to whatever `location` says (relative, file:, another host …)
    /status/<code>      that status; 429 carries Retry-After: 3, any status ?retry_after=N
    /latin1             ISO-8859-1 bytes, charset in the Content-Type
    /meta-charset       windows-1252 bytes, charset only in a <meta>
    /plain, /pdf, /huge text/plain; application/pdf; an HTML page over the extractor's cap
    /socket?to=<url>    an article whose script opens a WebSocket to `to`; <p id="socket"> says
                        how it ended (`open`, `error`, `closed`), or `waited` after a second
    /peer?ice=<urls>    an article whose script starts a WebRTC connection with these STUN and
                        TURN servers (comma-separated); <p id="peer"> says `gathered`, `none`
                        (no RTCPeerConnection) or `waited` after a second

`requests` lists every path asked for, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.servers.threaded import serve_in_thread

PARAGRAPH = (
    "Frugal routing sends each call to the cheapest provider that can serve it, and falls over to "
    "the next one when a provider fails, so that an agent pays only for the answers it gets. "
)
ARTICLE = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Frugal routing | Example</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article>
<h1>Frugal routing</h1>
<p>{PARAGRAPH * 3}</p>
<h2>How it fails over</h2>
<p>{PARAGRAPH * 2} Read the <a href="/docs/failover">failover notes</a>.</p>
<ul><li>cheap first</li><li>fast on request</li></ul>
</article>
<footer>Copyright 2026 Example</footer>
</body></html>"""
JS_TEXT = "Rendered by script: the quarterly numbers arrive only when JavaScript runs in a browser."
JS_ONLY = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Dashboard</title></head>
<body><div id="app"></div>
<script>
const app = document.getElementById("app");
const article = document.createElement("article");
article.innerHTML = "<h1>Quarterly report</h1>" + "<p>{JS_TEXT} {PARAGRAPH}</p>".repeat(4);
app.appendChild(article);
</script></body></html>"""
LATE = f"""<!doctype html>
<html><head><title>Late</title></head><body><article><h1>Late</h1><p>{PARAGRAPH * 2}</p></article>
<script>
setTimeout(() => {{
  const late = document.createElement("div");
  late.id = "late";
  late.innerHTML = "<p>The late part arrived after the load event.</p>";
  document.querySelector("article").appendChild(late);
}}, 300);
</script></body></html>"""
EMPTY = """<!doctype html><html><head><title>Sign in</title></head>
<body><nav><a href="/">Home</a></nav><form><input name="user"></form><footer>(c) Example</footer></body></html>"""
LATIN1_TEXT = "Crème brûlée à la française, déjà vu"
WINDOWS_TEXT = "Smart “quotes” — and a € sign"


def _reporting(title: str, report: str, script: str) -> str:
    """An article whose script ends by calling `say(what)`: <p id="{report}"> says it, once."""
    return f"""<!doctype html>
<html><head><title>{title}</title></head><body><article><h1>{title}</h1><p>{PARAGRAPH * 2}</p></article>
<script>
function say(what) {{
  if (document.getElementById("{report}")) return;
  const p = document.createElement("p");
  p.id = "{report}";
  p.textContent = what;
  document.body.appendChild(p);
}}
{script}
setTimeout(() => say("waited"), 1000);
</script></body></html>"""


SOCKET = _reporting(
    "Live",
    "socket",
    """try {
  const socket = new WebSocket(new URLSearchParams(location.search).get("to"));
  socket.onopen = () => say("open");
  socket.onerror = () => say("error");
  socket.onclose = () => say("closed");
} catch (e) { say("error"); }""",
)
PEER = _reporting(
    "Call",
    "peer",
    """const frame = document.createElement("iframe");
document.body.appendChild(frame);
const Peer = window.RTCPeerConnection || frame.contentWindow.RTCPeerConnection;
if (!Peer) {
  say("none");
} else {
  const urls = new URLSearchParams(location.search).get("ice").split(",");
  const peer = new Peer({iceServers: [{urls, username: "u", credential: "p"}]});
  peer.createDataChannel("d");
  peer.onicegatheringstatechange = () => { if (peer.iceGatheringState === "complete") say("gathered"); };
  peer.createOffer().then((offer) => peer.setLocalDescription(offer));
}""",
)


def _article_with(text: str) -> str:
    body = f"<article><h1>{text}</h1><p>{text}. {PARAGRAPH * 3}</p></article>"
    return f"<html><head><title>{text}</title></head><body>{body}</body></html>"


@dataclass
class PageServer:
    base: str
    requests: list[str] = field(default_factory=list)


def _app() -> Starlette:
    async def article(request: Request) -> Response:
        return HTMLResponse(ARTICLE)

    async def js_only(request: Request) -> Response:
        return HTMLResponse(JS_ONLY)

    async def late(request: Request) -> Response:
        return HTMLResponse(LATE)

    async def empty(request: Request) -> Response:
        return HTMLResponse(EMPTY)

    async def redirect(request: Request) -> Response:
        left = int(request.path_params["n"])
        return RedirectResponse("/article" if left <= 0 else f"/redirect/{left - 1}", status_code=302)

    async def to(request: Request) -> Response:
        return Response(status_code=302, headers={"Location": request.query_params["location"]})

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        wait = request.query_params.get("retry_after", "3" if code == 429 else None)
        headers = {"Retry-After": wait} if wait is not None else {}
        return HTMLResponse(f"<html><body><h1>Status {code}</h1></body></html>", status_code=code, headers=headers)

    async def latin1(request: Request) -> Response:
        return Response(_article_with(LATIN1_TEXT).encode("iso-8859-1"), media_type="text/html; charset=ISO-8859-1")

    async def meta_charset(request: Request) -> Response:
        page = _article_with(WINDOWS_TEXT).replace("<head>", '<head><meta charset="windows-1252">')
        return Response(page.encode("windows-1252"), headers={"Content-Type": "text/html"})

    async def socket(request: Request) -> Response:
        return HTMLResponse(SOCKET)

    async def peer(request: Request) -> Response:
        return HTMLResponse(PEER)

    async def plain(request: Request) -> Response:
        return PlainTextResponse("Just text.\nTwo lines of it.")

    async def pdf(request: Request) -> Response:
        return Response(b"%PDF-1.7\n", media_type="application/pdf")

    async def huge(request: Request) -> Response:
        return HTMLResponse("<html><body>" + "<p>word</p>" * 600_000 + "</body></html>")

    return Starlette(
        routes=[
            Route("/article", article),
            Route("/js-only", js_only),
            Route("/late", late),
            Route("/empty", empty),
            Route("/redirect/{n:int}", redirect),
            Route("/to", to),
            Route("/status/{code:int}", status),
            Route("/latin1", latin1),
            Route("/meta-charset", meta_charset),
            Route("/socket", socket),
            Route("/peer", peer),
            Route("/plain", plain),
            Route("/pdf", pdf),
            Route("/huge", huge),
        ]
    )


def _recording(app: ASGIApp, seen: list[str]) -> ASGIApp:
    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await app(scope, receive, send)

    return recorded


@contextmanager
def page_server() -> Iterator[PageServer]:
    requests: list[str] = []
    with serve_in_thread(_recording(_app(), requests)) as base:
        yield PageServer(base, requests)
