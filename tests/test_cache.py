"""The build cache (enzcc.backend.cache): a rebuild of unchanged code skips AD; a change misses; a damaged
entry is ignored and rebuilt, never used; --no-cache bypasses it; the size stays bounded; parallel builds of
the same program share one entry safely."""

import os
import subprocess
from pathlib import Path

from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

SRC = r"""#include <stdio.h>
#include <math.h>
double __enzyme_autodiff(void *, ...);
double f(double x) { return sin(x) * x * K; }
int main(void) { printf("%.12f\n", __enzyme_autodiff((void *)f, 0.5)); return 0; }
"""


def _build(enzcc, *flags, k="1", out="p"):
    enzcc.write("p.c", SRC.replace("K", k))
    r = enzcc("--time-report", "-O2", *flags, "p.c", "-lm", "-o", out)
    report = r.stdout + r.stderr
    return report, enzcc.run(f"./{out}").stdout.strip()


def _entries(cache: Path) -> list[Path]:
    return [p for sub in cache.iterdir() if sub.is_dir() for p in sub.iterdir()]


def _ran_ad(report: str) -> bool:
    return any(line.split("│")[1].strip() == "ad" for line in report.splitlines() if line.count("│") >= 3)


def test_hit_miss_and_stats(enzcc):
    cache = Path(enzcc.env["ENZCC_CACHE_DIR"])
    first, value = _build(enzcc)
    assert _ran_ad(first) and value == f"{0.5 * __import__('math').cos(0.5) + __import__('math').sin(0.5):.12f}"
    again, value2 = _build(enzcc)
    assert not _ran_ad(again) and "cache" in again and value2 == value
    changed, value3 = _build(enzcc, k="2")
    assert _ran_ad(changed) and abs(float(value3) - 2 * float(value)) < 1e-11
    stats = enzcc("--cache-stats").stdout
    assert "hits               1" in stats and "misses             2" in stats and "entries            2" in stats
    assert len(_entries(cache)) == 2 and not [p for p in _entries(cache) if p.name.startswith(".")]


def test_a_damaged_entry_is_ignored_and_rebuilt(enzcc):
    cache = Path(enzcc.env["ENZCC_CACHE_DIR"])
    _, value = _build(enzcc)
    (entry,) = _entries(cache)
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF  # a flipped bit in the stored object
    entry.write_bytes(bytes(data))
    report, again = _build(enzcc)
    assert _ran_ad(report) and again == value
    assert "damaged entries    1" in enzcc("--cache-stats").stdout
    report, third = _build(enzcc)  # the rebuilt entry replaced the damaged one
    assert not _ran_ad(report) and third == value
    entry.write_bytes(b"short")
    report, fourth = _build(enzcc)
    assert _ran_ad(report) and fourth == value


def test_no_cache(enzcc):
    cache = Path(enzcc.env["ENZCC_CACHE_DIR"])
    report, _ = _build(enzcc, "--no-cache")
    assert _ran_ad(report) and "cache" not in report and not cache.exists() or not _entries(cache)
    enzcc.env["ENZCC_NO_CACHE"] = "1"
    report, _ = _build(enzcc)
    assert _ran_ad(report) and "cache" not in report


def test_the_cache_stays_within_its_size(enzcc):
    cache = Path(enzcc.env["ENZCC_CACHE_DIR"])
    enzcc.env["ENZCC_CACHE_MAX_SIZE"] = "1"
    for k in ("1", "2", "3"):
        _build(enzcc, k=k)
    assert len(_entries(cache)) == 0  # (each entry alone is over the limit)
    enzcc.env["ENZCC_CACHE_MAX_SIZE"] = str(10 << 20)
    for k in ("1", "2", "3"):
        _build(enzcc, k=k)
    assert len(_entries(cache)) == 3


def test_parallel_builds_share_one_entry(enzcc):
    cache = Path(enzcc.env["ENZCC_CACHE_DIR"])
    enzcc.write("p.c", SRC.replace("K", "3"))
    procs = [subprocess.Popen(["enzcc", "-O2", "p.c", "-lm", "-o", f"p{i}"], cwd=enzcc.cwd, env=enzcc.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(4)]
    assert all(p.wait() == 0 for p in procs)
    outs = {enzcc.run(f"./p{i}").stdout for i in range(4)}
    assert len(outs) == 1
    assert len(_entries(cache)) == 1 and not [p for p in os.listdir(_entries(cache)[0].parent) if p.startswith(".")]
