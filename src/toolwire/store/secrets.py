"""Credentials at rest: Fernet encryption with a key from the environment or a key file.

The key comes from `TOOLWIRE_SECRET_KEY` when it is set; otherwise from the file `secret.key` in
the user's config folder, created with permissions 0600 the first time a credential is encrypted.
`TOOLWIRE_SECRET_KEY` may list several keys separated by commas: the first encrypts, every one of
them decrypts, so a key can be rotated by putting the new one first and saving each connection
again. The key is read only when a credential is actually encrypted or decrypted, so a database
without credentials never needs one.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

import platformdirs
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from toolwire.exceptions import ConfigError

__all__ = ["KEY_FILE_NAME", "SECRET_KEY_ENV", "SecretBox", "SecretKeyError", "default_key_file"]

SECRET_KEY_ENV = "TOOLWIRE_SECRET_KEY"
"""The environment variable holding the Fernet key (or several, comma-separated)."""

KEY_FILE_NAME = "secret.key"
"""The key file's name inside the user's config folder."""

_MAKE_KEY = 'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'


class SecretKeyError(ConfigError):
    """The encryption key is missing, malformed, unsafe, or not the one the credentials were written with."""


def default_key_file() -> Path:
    """Where the key is kept when `TOOLWIRE_SECRET_KEY` is not set: `<user config dir>/secret.key`."""
    return Path(platformdirs.user_config_dir("toolwire")) / KEY_FILE_NAME


def _fernet(keys: list[str], source: str) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.strip().encode()) for key in keys])
    except ValueError:
        raise SecretKeyError(
            f"{source} does not hold a valid key (32 url-safe base64-encoded bytes); "
            f"make one with {_MAKE_KEY}."
        ) from None


def _create_key_file(path: Path) -> None:
    """Write a new key to `path` unless another process just did; the file is never readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkstemp creates the file with 0600; the key is complete before the file appears under its name.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(Fernet.generate_key() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        # A hard link fails if the name exists: of two processes starting at once, one key wins.
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


def _read_key_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        _create_key_file(path)
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretKeyError(
            f"Cannot read the key file {path} ({exc}); fix its permissions or set {SECRET_KEY_ENV}."
        ) from None
    if os.name == "posix" and stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise SecretKeyError(
            f"The key file {path} can be read by other users; run chmod 600 {path} and try again."
        )
    return text


class SecretBox:
    """Encrypts a connection's credential values for the database, and decrypts them for a call.

    Args:
        keys: The Fernet keys, the first of which encrypts; `None` reads the key file.
        key_file: The key file to read (or create) when `keys` is `None`.

    Example:
        >>> box = SecretBox([Fernet.generate_key().decode()])
        >>> box.decrypt(box.encrypt({"token": "s3cret"}))
        {'token': 's3cret'}
    """

    def __init__(self, keys: list[str] | None = None, *, key_file: Path | None = None) -> None:
        self._keys = keys
        self.key_file = key_file or default_key_file()
        """The key file used when no key is given."""
        self._cipher: MultiFernet | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, key_file: Path | None = None) -> SecretBox:
        """The box for `TOOLWIRE_SECRET_KEY` when it is set, else for the key file.

        Args:
            environ: The environment to read; `os.environ` when `None`.
            key_file: The key file to use instead of the one in the user's config folder.
        """
        env = os.environ if environ is None else environ
        raw = env.get(SECRET_KEY_ENV, "").strip()
        keys = [key for key in raw.split(",") if key.strip()] if raw else None
        return cls(keys, key_file=key_file)

    @property
    def source(self) -> str:
        """Where the key comes from, for messages."""
        return f"this {SECRET_KEY_ENV}" if self._keys is not None else f"the key in {self.key_file}"

    def _get_cipher(self) -> MultiFernet:
        if self._cipher is None:
            if self._keys is not None:
                self._cipher = _fernet(self._keys, SECRET_KEY_ENV)
            else:
                self._cipher = _fernet([_read_key_file(self.key_file)], f"The key file {self.key_file}")
        return self._cipher

    def encrypt(self, secrets: Mapping[str, str]) -> bytes | None:
        """The credential values as one Fernet token; `None` when there are none.

        Raises:
            SecretKeyError: the key is malformed or its file unsafe.
        """
        if not secrets:
            return None
        return self._get_cipher().encrypt(json.dumps(dict(secrets), sort_keys=True).encode())

    def decrypt(self, token: bytes | None) -> dict[str, str]:
        """The credential values of a token written by `encrypt`; `{}` for `None`.

        Raises:
            SecretKeyError: the token was written with another key (or altered).
        """
        if token is None:
            return {}
        try:
            plain = self._get_cipher().decrypt(bytes(token))
        except InvalidToken:
            raise SecretKeyError(
                f"The stored credentials cannot be decrypted with {self.source}; set "
                f"{SECRET_KEY_ENV} to the key they were saved with, or enter them again with "
                "toolwire connections add NAME --replace."
            ) from None
        values = json.loads(plain)
        return {str(k): str(v) for k, v in values.items()}

    def __repr__(self) -> str:
        # Never the key itself: a repr ends up in logs.
        return f"SecretBox(source={self.source!r})"
