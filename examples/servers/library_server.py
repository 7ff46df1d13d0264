"""An offline search provider for the demo and the tests: an MCP server over a bundled corpus.

It is an ordinary `mcp` SDK server (MCPServer) over stdio. Its corpus is
examples/demo/library.json (thirty short documents); nothing here touches the network, and
every answer is deterministic, so a routed call through frugal-proxy answers the same way on
every run. Each document has URLs of its own under https://library.example/, which the page
tools resolve from the corpus, never by fetching them.

    search {query, max_results}    hits {title, url, snippet}, best first: a word of the query
                                   counts 3 in the title, 2 as a tag, 1 in the text; ties by id
    read_page {url}                a page as markdown {url, title, markdown}, read from the corpus
                                   (https://library.example/doc/<slug>); the reading room's
                                   /app/<slug> pages need JavaScript, so they read as an empty shell
    render_page {url}              a page as a browser sees it: /app/<slug> pages with their text
    mirror_search {query}          a mirror of the catalogue that is always down: it answers
                                   isError (the demo's deliberately failing provider)

    python examples/servers/library_server.py
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

CORPUS = Path(__file__).resolve().parents[1] / "demo" / "library.json"
HOST = "library.example"
MAX_RESULTS = 20
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be between by do does for from how i in is it of on or the to what when which why with".split()
)

server = MCPServer(
    "library",
    instructions="A small offline library: search its documents, read one as a page. No network.",
)


class Document(BaseModel):
    id: int
    slug: str
    title: str
    summary: str
    body: list[str]
    tags: list[str]

    @property
    def url(self) -> str:
        return f"https://{HOST}/doc/{self.slug}"


class Hit(BaseModel):
    title: str
    url: str
    snippet: str


class Hits(BaseModel):
    hits: list[Hit]


class Page(BaseModel):
    url: str
    title: str
    markdown: str


@functools.cache
def documents() -> tuple[Document, ...]:
    """The corpus, in id order."""
    loaded = json.loads(CORPUS.read_text(encoding="utf-8"))["documents"]
    return tuple(sorted((Document.model_validate(item) for item in loaded), key=lambda doc: doc.id))


def words(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


def score(document: Document, terms: list[str]) -> int:
    title = words(document.title)
    rest = words(" ".join([document.summary, *document.body]))
    return sum(3 * title.count(term) + 2 * document.tags.count(term) + rest.count(term) for term in terms)


@server.tool()
def search(query: str, max_results: int = 5) -> Hits:
    """Search the library's documents; best matches first."""
    terms = words(query)
    if not terms:
        raise ToolError("the query has no words to search for")
    ranked = sorted(((score(doc, terms), doc) for doc in documents()), key=lambda item: (-item[0], item[1].id))
    found = [doc for points, doc in ranked if points > 0][: max(1, min(max_results, MAX_RESULTS))]
    return Hits(hits=[Hit(title=doc.title, url=doc.url, snippet=doc.summary) for doc in found])


def page_of(url: str, rendered: bool) -> Page:
    """The page at a library URL: /doc/<slug> is plain markdown; /app/<slug> is the reading
    room's single-page app, whose text only a browser sees (a plain read gets the empty shell)."""
    parts = urlsplit(url)
    kind, _, slug = parts.path.strip("/").partition("/")
    found = next((doc for doc in documents() if doc.slug == slug), None)
    if parts.hostname != HOST or kind not in ("doc", "app") or found is None:
        raise ToolError(f"no page at {url} in the library (its pages are https://{HOST}/doc/<slug>)")
    if kind == "app" and not rendered:
        return Page(url=url, title="Reading room", markdown="# Reading room\n\nThis page needs JavaScript.\n")
    related = [doc for doc in documents() if doc is not found and set(doc.tags) & set(found.tags)]
    lines = [f"# {found.title}", "", found.summary, ""]
    for paragraph in found.body:
        lines += [paragraph, ""]
    lines += ["## Related", "", *(f"- [{doc.title}]({doc.url})" for doc in related)]
    return Page(url=url, title=found.title, markdown="\n".join(lines) + "\n")


@server.tool()
def read_page(url: str) -> Page:
    """A library page as markdown, read without a browser (an /app/ page reads as its empty shell)."""
    return page_of(url, rendered=False)


@server.tool()
def render_page(url: str) -> Page:
    """A library page as a browser renders it (an /app/ page with its text)."""
    return page_of(url, rendered=True)


@server.tool()
def mirror_search(query: str, max_results: int = 5) -> Hits:
    """A mirror of the library's catalogue. It is always down: the demo's failing provider."""
    raise ToolError("the mirror is down for maintenance")


if __name__ == "__main__":
    logging.disable(logging.INFO)  # the mirror fails on purpose: no log line for each of its calls
    server.run("stdio")
