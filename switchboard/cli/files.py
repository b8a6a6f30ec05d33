"""The files a command reads (a rules file, a secret, a config): text or JSON, or one line naming the flag."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument


def read_text(path: str, what: str, *, stdin: bool = False) -> str:
    """``path``'s text as UTF-8 (with ``stdin``, ``-`` is standard input); a file that cannot
    be read, or is not UTF-8, is an :class:`InvalidArgument` naming ``what`` and the path."""
    try:
        if stdin and path == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise InvalidArgument(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"{what}: {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}"
            f" at offset {exc.start})"
        ) from None


def read_json(path: str, what: str, *, stdin: bool = False) -> Any:
    """:func:`read_text`, parsed as JSON (a document that is not is named the same way)."""
    return parse_json(read_text(path, what, stdin=stdin), f"{what}: {path}")


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed as JSON; one that is not is an :class:`InvalidArgument` naming
    ``where`` (the flag, and the file it was read from)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"{where} is not JSON: {exc}") from None
    except RecursionError:  # the parser recurses into each array and object
        raise InvalidArgument(
            f"{where} nests too deeply (arrays or objects inside each other)"
        ) from None
