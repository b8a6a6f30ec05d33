"""Text as the console shows it: no character of a producer's or a tenant's may steer the
page's own words (a bidi override reversing a sentence) or hide (a control character)."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

#: C0 and C1 controls but tab and line breaks, DEL, and Unicode's bidi embeddings,
#: overrides, isolates and marks: each becomes U+FFFD, as the CLI's tables show them.
_HIDDEN = {
    c: "\ufffd"
    for c in [
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        *range(0x0E, 0x20),
        *range(0x7F, 0xA0),
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    ]
}


def shown(value: Any) -> Any:
    """What a template writes for ``value`` (Jinja's ``finalize``): strings, markup too,
    with :data:`_HIDDEN` replaced; everything else as it is."""
    if isinstance(value, Markup):
        return Markup(str.translate(value, _HIDDEN))
    if isinstance(value, str):
        return value.translate(_HIDDEN)
    return value
