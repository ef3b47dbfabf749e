"""The ``.env`` file Centrifugo v6 reads at startup: ``KEY=VALUE`` lines that become environment
variables unless the environment already sets them (a variable of the process always wins).

The format is godotenv's (the library Centrifugo uses): ``#`` comments and blank lines are
skipped, an optional ``export`` prefix is dropped, ``KEY: VALUE`` works too, values may be
single-quoted (literal), double-quoted (``\\n``, ``\\t``, ``\\"`` and ``\\\\`` escapes, may span
lines) or bare (an unquoted `` #`` starts a comment; surrounding spaces are trimmed);
``${NAME}`` and ``$NAME`` in bare and double-quoted values expand to an earlier key of the file,
else to the environment (a backslash before ``$`` keeps it literal). Pure apart from
``read_dotenv``, which reads the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from gateway.config.schema import ConfigError

DOTENV = ".env"
"""The file looked for in the working directory, as Centrifugo does."""

_KEY = re.compile(r"[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.]*)[ \t]*[=:][ \t]*")
_EXPAND = re.compile(r"(\\)?\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "\\$"}


def parse_dotenv(text: str, env: Mapping[str, str]) -> dict[str, str]:
    """The variables of a ``.env`` document in file order; ``env`` resolves ``${NAME}``.

    Raises:
        ConfigError: a line that is no assignment, or a quoted value left open.
    """
    values: dict[str, str] = {}
    pos, line_no = 0, 1
    while pos < len(text):
        end = text.find("\n", pos)
        line = text[pos : end if end != -1 else len(text)]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            pos, line_no = (end + 1 if end != -1 else len(text)), line_no + 1
            continue
        match = _KEY.match(text, pos)
        if match is None:
            raise ConfigError(".env", f"line {line_no}: expected KEY=VALUE")
        key, pos = match.group(1), match.end()
        value, pos, lines = _value(text, pos, line_no)
        values[key] = _expand(value, values, env) if value.expand else value.text
        line_no += lines
    return values


class _Value:
    __slots__ = ("expand", "text")

    def __init__(self, text: str, expand: bool) -> None:
        self.text = text
        self.expand = expand


def _value(text: str, pos: int, line_no: int) -> tuple[_Value, int, int]:
    """The value starting at ``pos``, the position after its line and the lines it spans."""
    quote = text[pos] if pos < len(text) and text[pos] in "'\"" else ""
    if not quote:
        end = text.find("\n", pos)
        end = end if end != -1 else len(text)
        raw = text[pos:end]
        comment = re.search(r"\s#", raw)
        raw = raw[: comment.start()] if comment else raw
        return _Value(raw.strip(), True), end + 1, 1
    close = pos + 1
    while True:
        close = text.find(quote, close)
        if close == -1:
            raise ConfigError(".env", f"line {line_no}: unterminated {quote}quoted value")
        if quote == "'" or not _escaped(text, close):
            break
        close += 1
    raw = text[pos + 1 : close]
    rest_end = text.find("\n", close)
    rest_end = rest_end if rest_end != -1 else len(text)
    spanned = raw.count("\n") + 1
    if quote == "'":
        return _Value(raw, False), rest_end + 1, spanned
    unescaped = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), raw)
    return _Value(unescaped, True), rest_end + 1, spanned


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and text[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _expand(value: _Value, earlier: Mapping[str, str], env: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(0)[1:]  # \$NAME stays literal
        name = match.group(2) or match.group(3)
        return earlier.get(name, env.get(name, ""))

    return _EXPAND.sub(substitute, value.text)


def read_dotenv(env: Mapping[str, str], directory: Path | None = None) -> dict[str, str] | None:
    """``env`` with the variables of ``<directory>/.env`` (default: the working directory) added
    where ``env`` does not set them; None when there is no such file.

    Raises:
        ConfigError: the file cannot be read or is not a valid ``.env`` document.
    """
    path = (directory or Path.cwd()) / DOTENV
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(".env", f"cannot read {path}: {exc}") from exc
    merged = dict(env)
    for key, value in parse_dotenv(text, env).items():
        merged.setdefault(key, value)
    return merged
