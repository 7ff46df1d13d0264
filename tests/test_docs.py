"""README.md and docs/*.md agree with the tree and with the command line.

Two checks: every relative link names a file that exists (and, for `#anchor` links into a
Markdown file, a heading that exists, slugged the way GitHub does), and every `--option` the
docs show for frugal-proxy is one the CLI still has. The CLI's options come from its own
`--help` output, so a renamed or removed option fails here instead of in a user's shell.

What counts as a frugal-proxy option: in a code line or an inline code span that invokes
`frugal-proxy`, the options after that word, up to a bare `--` (after which the arguments are
the upstream's), a shell comment or a pipe, checked against the options of the subcommand it
names; and an option named on its own (a code span such as `--http ADDR`, or a bare
`--option` in prose), checked against the options of every form. Other programs' command lines
(`docker run --rm …`, `.venv/bin/python bench/run.py --quick`, `pip install …`) are not
scanned, so the allow-list below only holds the few options of other programs that the docs
name on their own. Write another program's command line in code, and an option of frugal-proxy
anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock
from urllib.parse import unquote

import pytest

from frugal_proxy.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Options of other programs that the docs name on their own, outside their command line.
NOT_OURS = {
    "--quick": "bench/run.py and bench/http_run.py: a short run (docs/benchmark.md)",
    "--only": "bench/http_run.py: re-run some columns (docs/benchmark.md)",
    "--json": "bench/http_run.py --json FILE (docs/benchmark.md); `status --json` is checked as ours",
    "--frugal-arg": "bench/run.py: an option to pass to frugal-proxy (docs/benchmark.md)",
    "--requirements": "the official conformance suite's scenario set (docs/development.md)",
}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
SCHEME = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")
INVOCATION = re.compile(r"(?<![\w./@-])(?:frugal-proxy|-m frugal_proxy)(?![\w.-])")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Where a frugal-proxy command line stops being frugal-proxy's: the upstream's argv after a bare
# `--`, a shell comment, a pipe or another command.
COMMAND_END = re.compile(r"(?:^|\s)(?:--|#|\||;|&&)(?:\s|$)")


# -- Markdown -------------------------------------------------------------------------------------


def blocks(text: str) -> Iterator[tuple[bool, int, str]]:
    """(is_code, first line number, text) for each fenced code line (continuations joined)
    and each prose paragraph."""
    lines = text.split("\n")
    fence: str | None = None
    paragraph: list[str] = []
    start = 0
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        opening = FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
                continue
            if pending is not None:
                pending = (pending[0], pending[1] + " " + line.strip())
            else:
                pending = (number, line)
            if pending[1].endswith("\\"):
                pending = (pending[0], pending[1][:-1])
                continue
            yield True, pending[0], pending[1]
            pending = None
            continue
        if opening or not line.strip():
            if paragraph:
                yield False, start, "\n".join(paragraph)
                paragraph = []
            if opening:
                fence = opening.group(1)
            continue
        if not paragraph:
            start = number
        paragraph.append(line)
    if paragraph:
        yield False, start, "\n".join(paragraph)


def blank_code_spans(paragraph: str) -> str:
    """The paragraph with its code spans blanked out, line breaks (and so line numbers) kept."""
    return CODE_SPAN.sub(lambda span: re.sub(r"[^\n]", " ", span.group(0)), paragraph)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, punctuation other than
    `-` and `_` dropped, spaces turned into `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> frozenset[str]:
    """The anchors of every heading in a Markdown text (a repeated one gets `-1`, `-2`, …)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for is_code, _, block in blocks(text):
        if is_code:
            continue
        for line in block.split("\n"):
            match = HEADING.match(line)
            if not match:
                continue
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


@functools.cache
def file_anchors(path: Path) -> frozenset[str]:
    return anchors(path.read_text(encoding="utf-8"))


def link_problems(path: Path, text: str) -> list[str]:
    """Every relative link in `text` (the contents of `path`) that names no file or no heading."""
    problems = []
    for is_code, start, block in blocks(text):
        if is_code:
            continue
        prose = blank_code_spans(block)
        targets = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(prose)]
        targets += [(m.start(), m.group(1)) for m in REFERENCE_LINK.finditer(prose)]
        for offset, target in targets:
            if not target or SCHEME.match(target):
                continue
            where = f"{path.relative_to(ROOT)}:{start + prose.count(chr(10), 0, offset)}"
            file_part, _, anchor = target.partition("#")
            if not file_part:
                if anchor and unquote(anchor).lower() not in anchors(text):
                    problems.append(f"{where}: link to {target}: no heading with that anchor here")
                continue
            linked = (path.parent / unquote(file_part)).resolve()
            if not linked.is_relative_to(ROOT) or not linked.exists():
                problems.append(f"{where}: link to {target}: no such file")
            elif anchor and linked.suffix == ".md" and unquote(anchor).lower() not in file_anchors(linked):
                problems.append(f"{where}: link to {target}: {linked.name} has no heading with that anchor")
    return problems


# -- the command line -----------------------------------------------------------------------------


@functools.cache
def _help(*words: str) -> str:
    """`frugal-proxy WORDS --help`, run in this process: the same parser and text as the command
    (the terminal width argparse wraps at is a pipe's, 80, unless COLUMNS says otherwise), without
    the Python start-up per form that took a loaded machine past the per-test timeout."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": os.environ.get("COLUMNS", "80")}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code: object = main([*words, "--help"])
        except SystemExit as stopped:
            code = stopped.code
    assert code in (0, None), f"frugal-proxy {' '.join(words)} --help failed: {err.getvalue()}"
    return out.getvalue()


def _options(help_text: str) -> frozenset[str]:
    """The options argparse lists: the first column of each line that starts with `  -`."""
    found = set()
    for line in help_text.splitlines():
        if re.match(r"^ {2}-", line):
            found.update(OPTION.findall(re.split(r"\s{2,}", line.strip())[0]))
    return frozenset(found)


@functools.cache
def cli() -> dict[str, frozenset[str]]:
    """Each form's options: "" for the wrap form, "serve", "config check", "mcp install", …

    Subcommands are read from the top-level help's command list, their actions from the
    `{a,b}` choices in each one's usage line; a name the wrap form answers for is not one."""
    top = _help()
    forms = {"": _options(top)}
    listing = top.split("commands (each has its own --help):", 1)
    assert len(listing) == 2, "the top-level help no longer lists the subcommands"
    for line in listing[1].splitlines():
        if not line.strip():
            continue
        command = line.split()[0]
        text = _help(command)
        assert text.startswith(f"usage: frugal-proxy {command}"), f"`{command}` is listed but is not a subcommand"
        forms[command] = _options(text)
        choices = re.search(r"\{([\w,-]+)\}", text.split("\n\n", 1)[0])
        for action in choices.group(1).split(",") if choices else ():
            action_text = _help(command, action)
            assert action_text.startswith(f"usage: frugal-proxy {command}"), f"`{command} {action}` fails"
            forms[f"{command} {action}"] = _options(action_text)
    return forms


def _form(words: list[str], forms: dict[str, frozenset[str]]) -> str:
    if not words or words[0] not in forms or not words[0]:
        return ""
    if len(words) > 1 and f"{words[0]} {words[1]}" in forms:
        return f"{words[0]} {words[1]}"
    return words[0]


def option_problems(path: Path, text: str, forms: dict[str, frozenset[str]]) -> list[str]:
    """Every `--option` that `text` shows for frugal-proxy and that the CLI does not have."""
    every = frozenset().union(*forms.values())
    problems = []

    def check_alone(fragment: str, where: str) -> None:
        for option in OPTION.findall(fragment):
            if option not in every and option not in NOT_OURS:
                problems.append(f"{where}: {option} is no option of frugal-proxy (in `{fragment.strip()}`)")

    def check(fragment: str, line: int) -> None:
        where = f"{path.relative_to(ROOT)}:{line}"
        if fragment.lstrip("[ ").startswith("--"):  # an option named on its own: `--http ADDR`
            check_alone(fragment, where)
            return
        invocation = INVOCATION.search(fragment)
        if invocation is None:  # another program's command line, or no command at all
            return
        rest = fragment[invocation.end() :]
        end = COMMAND_END.search(rest)
        command, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
        form = _form(command.split(), forms)
        for option in OPTION.findall(command):
            if option not in forms[form]:
                name = f"frugal-proxy {form}".strip()
                problems.append(f"{where}: {option} is no option of `{name}` (in `{fragment.strip()}`)")
        comment = tail.split("#", 1)
        if len(comment) == 2 and tail.lstrip().startswith("#"):
            check_alone(comment[1], where)

    for is_code, start, block in blocks(text):
        if is_code:
            check(block, start)
            continue
        for span in CODE_SPAN.finditer(block):
            check(span.group(2), start + block.count("\n", 0, span.start()))
        prose = blank_code_spans(block)
        for match in OPTION.finditer(prose):
            check_alone(match.group(0), f"{path.relative_to(ROOT)}:{start + prose.count(chr(10), 0, match.start())}")
    return problems


# -- pointers in what the program writes ----------------------------------------------------------

# A doc named in generated text: a Markdown file's path from the checkout's root (with an optional
# `#anchor`), or a section of the README named in quotes.
DOC_POINTER = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?")
SECTION_POINTER = re.compile(r"README's [\"“]([^\"”]+)[\"”] section")


def pointer_problems(where: str, text: str) -> list[str]:
    """Every doc that `text` (something frugal-proxy writes) points to and the checkout lacks."""
    problems = []
    for match in DOC_POINTER.finditer(text):
        target = ROOT / match.group(1)
        if not target.is_file():
            problems.append(f"{where}: {match.group(0)}: no such file")
        elif match.group(2) and match.group(2) not in file_anchors(target):
            problems.append(f"{where}: {match.group(0)}: {match.group(1)} has no heading with that anchor")
    for match in SECTION_POINTER.finditer(text):
        if github_slug(match.group(1)) not in file_anchors(ROOT / "README.md"):
            problems.append(f"{where}: the README has no section {match.group(1)!r}")
    return problems


def generated_texts(tmp_path: Path) -> dict[str, str]:
    """What frugal-proxy writes that a user reads for directions: every form's --help and the
    starter file `config init` writes."""
    texts = {f"frugal-proxy {form} --help".replace("  ", " "): _help(*form.split()) for form in cli()}
    starter = tmp_path / "frugal.toml"
    done = subprocess.run(
        [sys.executable, "-m", "frugal_proxy", "config", "init", "--config", str(starter)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "FRUGAL_HOME": str(tmp_path / "home")},
    )
    assert done.returncode == 0, done.stderr
    texts["the starter file of config init"] = starter.read_text(encoding="utf-8")
    return texts


# -- the tests ------------------------------------------------------------------------------------


def test_the_docs_exist() -> None:
    assert len(DOCS) > 2, "docs/ holds no Markdown"
    assert (ROOT / "docs" / "README.md") in DOCS


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert link_problems(path, path.read_text(encoding="utf-8")) == []


def test_the_cli_is_discovered() -> None:
    forms = cli()
    for form in ("", "serve", "config check", "config init", "status", "ui", "mcp install", "mcp uninstall"):
        assert form in forms, f"frugal-proxy {form} was not found"
    assert "--http" in forms[""] and "--config" in forms["serve"] and "--wrap" in forms["mcp install"]
    assert "--wrap" not in forms[""] and "--stateless" not in forms["mcp install"]


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_documented_options_exist(path: Path) -> None:
    assert option_problems(path, path.read_text(encoding="utf-8"), cli()) == []


def test_every_option_is_in_the_cli_reference() -> None:
    mentioned = set(OPTION.findall((ROOT / "docs" / "cli.md").read_text(encoding="utf-8")))
    missing = sorted(
        " ".join(filter(None, ["frugal-proxy", form, option]))
        for form, options in cli().items()
        for option in options - mentioned
    )
    assert missing == [], "docs/cli.md does not document these"


def test_the_checks_catch_a_broken_link_and_a_bogus_option() -> None:
    path = ROOT / "docs" / "example.md"
    text = "\n".join(
        [
            "# Example",
            "See [the CLI](cli.md#the-wrap-form), [gone](no-such-file.md) and [nowhere](cli.md#no-such-heading).",
            "",
            "```sh",
            "frugal-proxy serve --no-govern      # a wrap option, not one of serve's",
            "frugal-proxy --bogus -- python server.py --its-own-flag",
            "frugal-proxy mcp uninstall          # unwrap what --wrap wrapped",
            "docker run --rm frugal-proxy",
            "```",
            "",
            "| `--also-bogus N` | a table row | `mcp install --wrap` |",
            "",
            "[back](#example), [down](#nothing), `[not a link](nowhere.md)`",
        ]
    )
    assert link_problems(path, text) == [
        "docs/example.md:2: link to no-such-file.md: no such file",
        "docs/example.md:2: link to cli.md#no-such-heading: cli.md has no heading with that anchor",
        "docs/example.md:13: link to #nothing: no heading with that anchor here",
    ]
    assert [problem.split(" (in ", 1)[0] for problem in option_problems(path, text, cli())] == [
        "docs/example.md:5: --no-govern is no option of `frugal-proxy serve`",
        "docs/example.md:6: --bogus is no option of `frugal-proxy`",
        "docs/example.md:11: --also-bogus is no option of frugal-proxy",
    ]


def test_generated_files_point_to_docs_that_exist(tmp_path: Path) -> None:
    texts = generated_texts(tmp_path)
    assert "docs/configuration.md" in texts["the starter file of config init"]
    assert [problem for where, text in texts.items() for problem in pointer_problems(where, text)] == []


def test_the_pointer_check_catches_a_missing_doc_and_section() -> None:
    text = "\n".join(
        [
            '# frugal-proxy configuration. Reference: the README\'s "Configuration" section.',
            "# Every key: docs/configuration.md; the eras: docs/eras.md#no-such-heading; docs/gone.md",
            "see the README's \u201cThe two commands\u201d section",
        ]
    )
    assert pointer_problems("starter", text) == [
        "starter: docs/eras.md#no-such-heading: docs/eras.md has no heading with that anchor",
        "starter: docs/gone.md: no such file",
        "starter: the README has no section 'Configuration'",
    ]


def test_github_slugs() -> None:
    assert github_slug("Into your MCP clients: `mcp install`") == "into-your-mcp-clients-mcp-install"
    assert github_slug("2024-11-05 HTTP+SSE clients (legacy SSE)") == "2024-11-05-httpsse-clients-legacy-sse"
    assert github_slug("The proxy's own tools") == "the-proxys-own-tools"
    assert github_slug("Remote (URL) upstreams") == "remote-url-upstreams"
