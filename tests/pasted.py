"""What a person types from the docs' examples: the prompts' commands, never the output.

The docs' copy buttons (`docs/javascripts/copy.js`) copy the same text.
"""

from __future__ import annotations

import codeop
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(page: Path) -> Iterator[str]:
    """The code blocks of `page` that a prompt opens (`$ ` or `>>> `)."""
    for match in _FENCE.finditer(page.read_text()):
        if match[2].lstrip().startswith(("$ ", ">>> ")):
            yield match[2]


def typed(block: str) -> str:
    """The lines a person types: after each prompt, and a shell line's continuations."""
    lines, kept = block.rstrip("\n").split("\n"), list[str]()
    repl = block.lstrip().startswith(">>> ")
    prompt = re.compile(r"^(>>> |\.\.\. |\.\.\.$)" if repl else r"^\$ ")
    for line in lines:
        if prompt.match(line) or (kept and not repl and kept[-1].endswith("\\")):
            kept.append(prompt.sub("", line))
    return "\n".join(kept).rstrip()  # as the copy button gives it


def repl_error(text: str) -> str | None:
    """Why `text`, pasted line by line into Python's REPL, fails to compile (None: it does not)."""
    pending: list[str] = []
    for line in [*text.split("\n"), ""]:
        pending.append(line)
        try:
            done = codeop.compile_command("\n".join(pending), symbol="single")
        except SyntaxError as error:
            return f"{error.msg} at {line!r}"
        if done is not None or not "".join(pending).strip():
            pending = []
    return None
