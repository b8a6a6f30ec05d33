"""Tokens and secrets: minting, hashing, and encrypting signing secrets at rest."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from .errors import ConfigError
from .oserrors import unusable_data_dir


def mint_token(prefix: str = "", nbytes: int = 32) -> str:
    """A fresh random token, hex-encoded, optionally prefixed (``sbe_``, ``whsec_``)."""
    return prefix + secrets.token_hex(nbytes)


def hash_token(token: str) -> str:
    """Tokens are 256-bit random, so a plain SHA-256 is a safe lookup hash."""
    return hashlib.sha256(token.encode()).hexdigest()


class SecretBox:
    """Encrypts webhook signing secrets with a key derived from SWITCHBOARD_SECRET_KEY."""

    def __init__(self, secret_key: str) -> None:
        digest = hashlib.sha256(b"switchboard/signing-secrets/v1\0" + secret_key.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))

    def seal(self, plaintext: str) -> bytes:
        return self._fernet.encrypt(plaintext.encode())

    def open(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(sealed)).decode()
        except InvalidToken:
            raise ConfigError(
                "a stored signing secret cannot be decrypted: SWITCHBOARD_SECRET_KEY changed"
            ) from None


#: What a data dir that cannot keep the generated key may do instead.
_KEY_HINT = "it keeps the generated secret.key: make it writable, or set SWITCHBOARD_SECRET_KEY"


def load_or_create_secret_key(
    configured: str | None, data_dir: Path, source: str | None = None
) -> str:
    """The configured key, else the one generated into ``<data_dir>/secret.key``.

    A data dir where that file can be neither read nor created is a ``ConfigError`` naming
    it (``source``: where ``data_dir`` was set) and the OS's reason.
    """
    if configured:
        return configured
    path = data_dir / "secret.key"
    try:
        if path.exists():
            return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, f"read {path.name}", exc, _KEY_HINT) from None
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, "create it", exc, _KEY_HINT) from None
    key = secrets.token_urlsafe(32)
    # O_EXCL: two processes starting at once must agree on one key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, f"write {path.name}", exc, _KEY_HINT) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return key
