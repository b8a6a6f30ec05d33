"""Tokens and secrets: minting, hashing, and encrypting signing secrets at rest."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import time
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from .errors import ConfigError
from .oserrors import unusable_data_dir
from .resources import load_schema


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
            # Which setting holds the key is not known here (and this text may reach an
            # HTTP client): serve's start-up check names it (cli/serve.py).
            raise ConfigError(
                "a stored signing secret cannot be decrypted: the secret key changed"
            ) from None

    def opens(self, sealed: bytes) -> bool:
        """Whether ``sealed`` was sealed with this box's key."""
        try:
            self._fernet.decrypt(bytes(sealed))
        except InvalidToken:
            return False
        return True


#: What a data dir that cannot keep the generated key may do instead.
_KEY_HINT = "it keeps the generated secret.key: make it writable, or set SWITCHBOARD_SECRET_KEY"
#: How long a secret.key another process just created may take to hold its key.
_WRITTEN_WITHIN_S = 2.0
#: What to do about a secret.key that holds no usable key.
_FILE_HINT = (
    "put back the key the signing secrets were sealed with (or set SWITCHBOARD_SECRET_KEY),"
    " or delete the file for a new one to be generated (every webhook's signing secret then"
    " needs rotating)"
)


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
        exists = path.exists()
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, f"read {path.name}", exc, _KEY_HINT) from None
    if exists:
        return _read_key(path, source)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, "create it", exc, _KEY_HINT) from None
    key = secrets.token_urlsafe(32)
    # O_EXCL: two processes starting at once must agree on one key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another process created it a moment ago: its key may not be written yet.
        deadline = time.monotonic() + _WRITTEN_WITHIN_S
        while time.monotonic() < deadline and _empty(path):
            time.sleep(0.01)
        return _read_key(path, source)
    except OSError as exc:
        raise unusable_data_dir(data_dir, source, f"write {path.name}", exc, _KEY_HINT) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return key


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:  # told by _read_key
        return False


def _read_key(path: Path, source: str | None) -> str:
    """The key in ``path`` (``<data_dir>/secret.key``), held to the rule
    ``SWITCHBOARD_SECRET_KEY`` and ``secret_key`` are: a short or empty one (anyone could
    derive the sealing key from it) or one that is not text is a ``ConfigError`` naming the
    file, never a key used."""
    try:
        key = path.read_bytes().decode("utf-8").strip()
    except OSError as exc:
        raise unusable_data_dir(path.parent, source, f"read {path.name}", exc, _KEY_HINT) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"secret key file {path}: is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}"
            f" at offset {exc.start}); {_FILE_HINT}"
        ) from None
    shortest = int(load_schema("config")["properties"]["secret_key"]["minLength"])
    if len(key) < shortest:
        got = "it is empty" if not key else f"got {len(key)} characters"
        raise ConfigError(
            f"secret key file {path}: the key must be at least {shortest} characters ({got});"
            f" {_FILE_HINT}"
        )
    return key
