"""`frugal__execute`'s classifier: an intent in plain words onto one capability, by URL and
keyword cues alone (no model call, the same intent always lands in the same place).

    a URL (or a bare domain with a path) and a cue that the page needs a browser
        (render, javascript, JS, browser, screenshot, click, scroll, dynamic, SPA)  → browse
    a URL otherwise                                                                 → extract
    anything else                                                                   → search

Only the words outside the URLs are cues: `read https://example.com/pages/js` and
`…/docs/Web/JavaScript` are reads, not renders. For search, leading request words ("search for",
"find", "look up", "google", "what is" …) and trailing punctuation are dropped from the query;
for extract and browse the first URL is the page.
A URL extraction that comes back empty or nearly so falls forward to a browse (the router's job:
this module only says where an intent goes and why).
"""

from __future__ import annotations

import re

import msgspec

_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
# A bare domain with a path or a well-known TLD: "example.com/docs", "docs.python.org".
_BARE = re.compile(
    r"(?<![@\w.])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|org|net|io|dev|ai|app|edu|gov|co|de|uk|fr|jp|info|me)"
    r"(?:/[^\s<>\"'`]*)?)(?![\w.-])",
    re.IGNORECASE,
)
_BROWSE_CUES = re.compile(
    r"\b(render(?:ed|ing)?|javascript|js|browser|headless|screenshot|click|scroll|dynamic(?:ally)?|spa|"
    r"client-side|single[- ]page)\b",
    re.IGNORECASE,
)
_LEADING = re.compile(
    r"^\s*(?:please\s+)?(?:can you\s+|could you\s+)?(?:search(?:\s+the\s+web)?(?:\s+for)?|find(?:\s+me)?|look\s+up|"
    r"google|lookup|web\s+search(?:\s+for)?|what\s+is|what\s+are|who\s+is|tell\s+me\s+about)\s*:?\s+",
    re.IGNORECASE,
)
_TRAILING_PUNCTUATION = ".,;:!?)]}>'\""
MIN_EXTRACT_CHARS = 200  # an extraction shorter than this counts as near-empty: try a browser


class Intent(msgspec.Struct, frozen=True):
    capability: str  # "search", "extract" or "browse"
    query: str | None = None
    url: str | None = None
    why: str = ""


def classify(intent: str) -> Intent:
    """Where an intent goes, and the one-line why the receipt quotes."""
    text = " ".join(intent.split())
    url = _first_url(text)
    if url is not None:
        cue = _BROWSE_CUES.search(_BARE.sub(" ", _URL.sub(" ", text)))  # the words around the URLs
        if cue is not None:
            return Intent("browse", url=url, why=f"a URL and the cue {cue.group(0)!r}: rendered in a browser")
        return Intent("extract", url=url, why="a URL: the page is read")
    query = _LEADING.sub("", text).strip().rstrip("?.!") or text
    return Intent("search", query=query, why="no URL: routed to a web search")


def _first_url(text: str) -> str | None:
    found = _URL.search(text)
    if found is not None:
        return found.group(0).rstrip(_TRAILING_PUNCTUATION)
    bare = _BARE.search(text)
    if bare is not None:
        return "https://" + bare.group(1).rstrip(_TRAILING_PUNCTUATION)
    return None
