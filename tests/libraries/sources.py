"""Third-party C library sources for the real-library tests, fetched at test time, never committed.

Each library is a pinned release archive from a package registry (Debian source packages, PyPI source
distributions) with its sha256. The archive is downloaded once into a cache outside the repository
(``$ENZCC_SOURCES_CACHE``, else ``~/.cache/enzcc-sources``), checked against its hash and extracted once.
Downloads and extractions go to a temporary name first and are renamed into place, so parallel test
processes (``pytest -n``) never see half a file. An archive put into the cache by hand (same file name)
is used without the network.

``source_dir(name)`` is what tests call: it skips the test, with the reason, when a source cannot be had
(no network, HTTP error, hash mismatch). ``fetch(name)`` is the same without pytest (the benchmarks):
it raises ``SourceUnavailable``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DEBIAN = "https://deb.debian.org/debian/pool/main"
PYPI = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True)
class Source:
    """One pinned archive: where it comes from, its sha256, and the folder inside it the tests use."""
    version: str
    url: str
    sha256: str
    subdir: str

    @property
    def archive_name(self) -> str:
        return self.url.rsplit("/", 1)[1]


SOURCES: dict[str, Source] = {
    # Debian trixie orig tarballs (hashes from trixie's Sources index)
    "liblbfgs": Source("1.10", f"{DEBIAN}/libl/liblbfgs/liblbfgs_1.10.orig.tar.gz",
                       "e2a4085a8568e84268bcf0a40a5319f6591eefb30574c71f7ff4723ba35930f7", "liblbfgs-1.10"),
    "cminpack": Source("1.3.6", f"{DEBIAN}/c/cminpack/cminpack_1.3.6.orig.tar.gz",
                       "3c07fd21308c96477a2c900032e21d937739c233ee273b4347a0d4a84a32d09f", "cminpack-1.3.6"),
    "gsl": Source("2.8", f"{DEBIAN}/g/gsl/gsl_2.8+dfsg.orig.tar.gz",
                  "69614b7005133a2d3a75827044164de98670568382e3192888a3185578451a70", "gsl-2.8"),
    "kissfft": Source("131.1.0", f"{DEBIAN}/k/kissfft/kissfft_131.1.0.orig.tar.gz",
                      "76c1aac87ddb7258f34b08a13f0eebf9e53afa299857568346aa5c82bcafaf1a", "kissfft-131.1.0"),
    # PyPI source distributions (hashes from PyPI's simple index); tinyexpr is vendored in tinex's sdist
    "tinyexpr": Source("tinex 0.3.1", f"{PYPI}/57/6b/4ce7e521cdbcb7aa8b7ddb84072ef946c168a6d03eddacbd85532bf4da62/"
                       "tinex-0.3.1.tar.gz",
                       "b1ed16072279f1c3fe1be1c73262f5255f1bb33881e3b18ad0e9b2334842a745", "tinex-0.3.1/tinyexpr"),
    "rebound": Source("4.4.11", f"{PYPI}/bd/48/151e73d5d4849504c6893ff4b1213e98ca9e5e55d27abe9cf6a944473a17/"
                      "rebound-4.4.11.tar.gz",
                      "1d2a492af8b7234eaaf22e687def7e53d767d559ae7d0f04c451c73cc8fb1e26", "rebound-4.4.11"),
}

TIMEOUT_S = 60


class SourceUnavailable(Exception):
    """A library's source could not be had; the message says which and why, in one line."""


def cache_dir() -> Path:
    """Outside the repository by default, so that nothing fetched is ever committed or carried."""
    return Path(os.environ.get("ENZCC_SOURCES_CACHE") or Path.home() / ".cache" / "enzcc-sources")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _temp_in(folder: Path, suffix: str) -> Path:
    """A fresh name in the same folder as the final one, so that the rename into place is atomic."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".part-", suffix=suffix)
    os.close(fd)
    return Path(name)


def _download(name: str, src: Source, dest: Path) -> None:
    """Download to a temporary name, check the hash, then rename: a reader never sees a partial archive."""
    tmp = _temp_in(dest.parent, ".download")
    try:
        try:
            with urllib.request.urlopen(src.url, timeout=TIMEOUT_S) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise SourceUnavailable(f"{name} {src.version}: cannot download {src.url}: {e}") from None
        got = _sha256(tmp)
        if got != src.sha256:
            raise SourceUnavailable(f"{name} {src.version}: sha256 mismatch for {src.url}: "
                                    f"got {got}, pinned {src.sha256}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _archive(name: str, src: Source) -> Path:
    """The verified archive in the cache, downloaded if it is not there (or is there but corrupt)."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SourceUnavailable(f"{name}: cannot create the source cache {folder}: {e}") from None
    path = folder / src.archive_name
    if path.exists() and _sha256(path) == src.sha256:
        return path
    _download(name, src, path)
    return path


def _extract(archive: Path, dest: Path) -> None:
    """Extract into a temporary folder and rename it into place; a concurrent extractor's result wins."""
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".part-"))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")  # no absolute paths, no links out of the folder
            else:  # pragma: no cover (Python without extraction filters)
                tar.extractall(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(name: str) -> Path:
    """The folder of library ``name`` (``SOURCES[name].subdir`` inside the extracted archive)."""
    src = SOURCES[name]
    archive = _archive(name, src)
    dest = archive.parent / f"{archive.name}.d"
    if not dest.is_dir():
        try:
            _extract(archive, dest)
        except (tarfile.TarError, OSError) as e:
            raise SourceUnavailable(f"{name} {src.version}: cannot extract {archive}: {e}") from None
    folder = dest / src.subdir
    if not folder.is_dir():
        raise SourceUnavailable(f"{name} {src.version}: {src.subdir} not in {archive.name}")
    return folder


def source_dir(name: str) -> Path:
    """``fetch(name)`` for tests: skips the test with the reason when the source cannot be had."""
    import pytest

    try:
        return fetch(name)
    except SourceUnavailable as e:
        pytest.skip(f"source not available: {e}")
