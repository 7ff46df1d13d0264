"""An MCP server whose results are as large as you ask, for the size governor's demo and tests.

Every tool is deterministic, so a result seen through the proxy (and reassembled from its
slices) can be compared byte for byte with the direct one. An `mcp` SDK server over stdio.

    list_papers {count}         `count` paper records (a JSON array: records mode)
    papers_json {count}         the same records as a JSON string (`-> str`: text block and
                                structuredContent.result both hold the array's JSON)
    papers_one_block {count}    the same records as fastmcp renders a list: one text block with
                                the array's JSON beside structuredContent {"result": [...]}
    shelf_papers {count}        a shelf of `count` papers whose outputSchema sets minItems 60
    read_log {lines}            `lines` log lines (line-oriented text: lines mode)
    read_prose {paragraphs}     paragraphs of prose with multi-byte characters (text mode)
    echo_small {text}           the text back (always within budget)
    big_blob {bytes}            exactly `bytes` bytes of ASCII text

    python examples/servers/bulky_server.py
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

server = MCPServer("bulky", instructions="Deterministic large results for exercising the size governor.")

TOPICS = ("tidal energy", "soil carbon", "glacier retreat", "urban heat", "coral bleaching", "river deltas")
LEVELS = ("INFO", "INFO", "INFO", "WARN", "DEBUG", "ERROR")
# Prose with two-, three- and four-byte characters, so that every cut lands near one.
WORDS = ("café", "naïve", "Straße", "façade", "東京", "données", "smörgåsbord", "🌊", "Ωmega", "déjà", "vu")


class Paper(BaseModel):
    id: int
    title: str
    year: int
    authors: list[str]
    abstract: str


def paper(number: int) -> Paper:
    topic = TOPICS[number % len(TOPICS)]
    return Paper(
        id=number,
        title=f"On {topic}, part {number}",
        year=1990 + number % 35,
        authors=[f"Author {number % 7}", f"Author {(number * 3) % 11}"],
        abstract=f"We study {topic} in setting {number} and report what changed. " * 3,
    )


@server.tool()
def list_papers(count: int) -> list[Paper]:
    """`count` paper records, numbered from 0."""
    return [paper(number) for number in range(count)]


@server.tool()
def papers_json(count: int) -> str:
    """`count` paper records as a JSON array in a string, the way many Python tools return lists."""
    return json.dumps([paper(number).model_dump() for number in range(count)])


@server.tool()
def papers_one_block(count: int) -> CallToolResult:
    """`count` paper records as one text block of JSON plus structuredContent {"result": [...]}."""
    records = [paper(number).model_dump() for number in range(count)]
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(records))], structured_content={"result": records}
    )


# More than the governor's default 50 records: the schema, not the budget, decides what is kept.
SHELF_MIN = 60


class Shelf(BaseModel):
    name: str
    papers: list[Paper] = Field(min_length=SHELF_MIN)


@server.tool()
def shelf_papers(count: int) -> Shelf:
    """A shelf of `count` papers (at least 60: its outputSchema declares minItems 60)."""
    return Shelf(name="tides", papers=[paper(number) for number in range(max(count, SHELF_MIN))])


def log_line(number: int) -> str:
    level = LEVELS[number % len(LEVELS)]
    return f"2026-01-01T00:{number // 60 % 60:02d}:{number % 60:02d}Z {level} worker={number % 4} job={number} done"


@server.tool()
def read_log(lines: int) -> str:
    """`lines` log lines, each ending with a newline."""
    return "".join(log_line(number) + "\n" for number in range(lines))


def paragraph(number: int) -> str:
    words = [WORDS[(number * 7 + i * 3) % len(WORDS)] for i in range(60 + number % 40)]
    return f"§{number}. " + " ".join(words) + "."


@server.tool()
def read_prose(paragraphs: int) -> str:
    """`paragraphs` paragraphs of prose separated by blank lines."""
    return "\n\n".join(paragraph(number) for number in range(paragraphs))


@server.tool()
def echo_small(text: str) -> str:
    """The text back, unchanged."""
    return text


@server.tool()
def big_blob(bytes: int) -> str:
    """Exactly `bytes` bytes of ASCII text."""
    line = "frugal-proxy keeps the rest of this blob for you. "
    return (line * (bytes // len(line) + 1))[:bytes]


if __name__ == "__main__":
    server.run("stdio")
