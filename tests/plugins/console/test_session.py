"""The console's session cookie and CSRF tokens: genuine ones open, anything else does not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from switchboard_console import session


def _keys(tmp_path: Path, secret: str | None = "k" * 43) -> session.Keys:
    rt: Any = SimpleNamespace(config=SimpleNamespace(raw={"secret_key": secret}, data_dir=tmp_path))
    return session.Keys(rt)


EP = "0b2f4f1e-8c1d-4d6e-9a55-0e0d5c1b2a33"


def test_a_sealed_session_opens_until_it_expires(tmp_path: Path) -> None:
    keys = _keys(tmp_path)
    value = keys.seal(EP, now=1_000_000)
    assert keys.open(value, now=1_000_000 + 60) == EP
    assert keys.open(value, now=1_000_000 + session.MAX_AGE_S + 1) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v.replace(EP, "1" + EP[1:]),  # another endpoint's id
        lambda v: v.replace(".1000000.", ".1000001."),  # a later issue time
        lambda v: v[:-2] + ("AA" if v[-2:] != "AA" else "BB"),  # a forged mac
        lambda v: v + ".x",
        lambda v: "",
        lambda v: EP,
    ],
)
def test_a_changed_or_forged_session_does_not_open(tmp_path: Path, change: Any) -> None:
    keys = _keys(tmp_path)
    assert keys.open(change(keys.seal(EP, now=1_000_000)), now=1_000_000) is None


def test_another_servers_key_opens_nothing_and_csrf_tokens_bind_to_the_nonce(
    tmp_path: Path,
) -> None:
    ours, theirs = _keys(tmp_path), _keys(tmp_path, "z" * 43)
    assert theirs.open(ours.seal(EP)) is None
    nonce = session.new_nonce()
    assert ours.csrf_ok(nonce, ours.csrf_token(nonce))
    assert not ours.csrf_ok(nonce, theirs.csrf_token(nonce))
    assert not ours.csrf_ok(session.new_nonce(), ours.csrf_token(nonce))
    assert not ours.csrf_ok(None, ours.csrf_token(nonce)) and not ours.csrf_ok(nonce, "")
    # the cookie and the CSRF token never share a key
    assert ours.csrf_token(EP) not in ours.seal(EP)
