"""One helper tells every schema error as the deepest failing field and what it expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchboard.config import load_config
from switchboard.errors import ConfigError


@pytest.mark.parametrize(
    ("toml", "told"),
    [
        # anyOf ["auto", integer]: the integer branch fits an integer, so its bound is told
        ("[server]\nworkers = 100\n", "server.workers: must be at most 64 (got 100)"),
        # a string fits neither branch: each branch's first error, then what was given
        (
            '[server]\nworkers = "many"\n',
            'server.workers: matches none of the allowed forms: must be "auto";'
            ' or must be an integer (got "many")',
        ),
        ("[server]\nworkerz = 2\n", "server.workerz: unknown key"),
        ('base_url = "ftp://x"\n', 'base_url: must be an http:// or https:// URL (got "ftp://x")'),
    ],
)
def test_config_errors_name_the_field_and_the_value(tmp_path: Path, toml: str, told: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert str(caught.value) == f"config file {path}: {told}"
    assert "given schemas" not in str(caught.value) and "{" not in told
