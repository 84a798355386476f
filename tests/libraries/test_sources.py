"""The source fetcher: a verified archive is extracted once; a bad hash or no network skips with the reason."""

from __future__ import annotations

import hashlib
import io
import tarfile
from concurrent.futures import ThreadPoolExecutor

import pytest

import sources


def _tarball(path, files: dict[str, str]) -> str:
    """A .tar.gz holding ``files``; returns its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A registry of one library served from a file:// URL, and an empty cache."""
    served = tmp_path / "served"
    served.mkdir()
    archive = served / "lib-1.0.tar.gz"
    digest = _tarball(archive, {"lib-1.0/src/lib.c": "int lib(void) { return 1; }\n"})
    monkeypatch.setenv("ENZCC_SOURCES_CACHE", str(tmp_path / "cache"))

    def register(sha: str = digest, url: str = archive.as_uri(), subdir: str = "lib-1.0"):
        monkeypatch.setitem(sources.SOURCES, "lib", sources.Source("1.0", url, sha, subdir))
    return register


def test_verified_archive_is_extracted_once(fake, tmp_path):
    fake()
    with ThreadPoolExecutor(4) as pool:  # concurrent callers all get the same complete folder
        folders = list(pool.map(lambda _: sources.fetch("lib"), range(8)))
    assert len(set(folders)) == 1
    assert (folders[0] / "src" / "lib.c").read_text().startswith("int lib")
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".part-")]
    assert leftovers == []


def test_hash_mismatch_is_refused_and_nothing_cached(fake, tmp_path):
    fake(sha="0" * 64)
    with pytest.raises(sources.SourceUnavailable, match="sha256 mismatch"):
        sources.fetch("lib")
    assert list((tmp_path / "cache").iterdir()) == []


def test_unreachable_source_skips_with_reason(fake, tmp_path):
    fake(url=(tmp_path / "missing.tar.gz").as_uri())
    with pytest.raises(pytest.skip.Exception, match="source not available: lib 1.0: cannot download"):
        sources.source_dir("lib")


def test_pinned_table_is_complete():
    assert set(sources.SOURCES) == {"liblbfgs", "cminpack", "kissfft", "tinyexpr", "rebound", "gsl"}
    for src in sources.SOURCES.values():
        assert src.url.startswith("https://") and len(src.sha256) == 64
