"""An MCP server over stdio that answers questions from a markdown FAQ a server owner edits.

Run by a persona's ``[[mcp_servers]]`` entry (see personas/../examples/faq/guide.toml):

    command = "python"
    args = ["examples/faq/faq_server.py", "examples/faq/faq.md"]

One tool, ``search_faq(query)``: the FAQ's sections (each ``## heading`` and the text under it) that share the most
words with the query, best first, at most two. The file is read on every call, so an edit counts at once. Words are
compared case-folded; Japanese, Chinese and Korean text is compared by pairs of characters (it has no spaces).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

__all__ = ("Section", "parse_faq", "search")

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "can",
        "do",
        "does",
        "for",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "the",
        "to",
        "we",
        "what",
        "when",
        "where",
        "who",
        "why",
        "with",
        "you",
        "your",
    ]
)
MAX_SECTIONS = 2

Section = tuple[str, str]  # (heading, answer)


def parse_faq(text: str) -> list[Section]:
    """The ``##`` sections of a markdown file: (heading, the text under it)."""
    sections: list[Section] = []
    heading: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            if heading is not None:
                sections.append((heading, "\n".join(body).strip()))
            heading, body = line[3:].strip(), []
        elif line.startswith("# "):
            continue
        elif heading is not None:
            body.append(line)
    if heading is not None:
        sections.append((heading, "\n".join(body).strip()))
    return [(title, answer) for title, answer in sections if title]


def _terms(text: str) -> set[str]:
    terms: set[str] = set()
    for word in re.findall(r"\w+", text.casefold()):
        if word.isascii():
            if word not in STOP_WORDS and len(word) > 1:
                terms.add(word.rstrip("s") if len(word) > 3 else word)
        else:
            terms.update(word[i : i + 2] for i in range(max(1, len(word) - 1)))
    return terms


def search(text: str, query: str) -> str:
    """The answer to ``query`` from the FAQ ``text``: the best sections, or what the FAQ covers when none fits."""
    sections = parse_faq(text)
    wanted = _terms(query)
    scored = []
    for index, (heading, answer) in enumerate(sections):
        score = 2 * len(wanted & _terms(heading)) + len(wanted & _terms(answer))
        if score > 0:
            scored.append((-score, index, heading, answer))
    if not scored:
        topics = "; ".join(heading for heading, _ in sections) or "nothing yet"
        return f"The FAQ has no answer to that. It covers: {topics}"
    return "\n\n".join(f"{answer}\n(FAQ: {heading})" for _, _, heading, answer in sorted(scored)[:MAX_SECTIONS])


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("faq.md"))
    server = MCPServer("faq", instructions="Answers questions about this server from its FAQ.", log_level="WARNING")

    @server.tool()
    def search_faq(query: str) -> str:
        """Search the server's FAQ (rules, roles, events, moderators, bug reports). Give the question in a few words;
        the answer is the FAQ's best matching entries."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ToolError(f"the FAQ file cannot be read: {error.strerror or error}") from None
        return search(text, query)

    server.run("stdio")


if __name__ == "__main__":
    main()
