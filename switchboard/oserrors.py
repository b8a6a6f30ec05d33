"""OS errors told as one line: the OS's reason, and a data dir that cannot be used."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError


def os_reason(exc: OSError) -> str:
    """The OS's reason for ``exc`` as a clause: ``read-only file system``."""
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def unusable_data_dir(
    data_dir: Path, source: str | None, doing: str, exc: OSError, hint: str = ""
) -> ConfigError:
    """The one line for a data dir that cannot be used (exit 2: the value must change):
    which, where it was set (``source``), and the OS's reason."""
    where = f" (from {source})" if source else ""
    if data_dir.exists() and not data_dir.is_dir():
        why = "it is a file, not a directory"
    else:
        why = f"cannot {doing}: {os_reason(exc)}"
    return ConfigError(f"cannot use data_dir {data_dir}{where}: {why}{'; ' + hint if hint else ''}")
