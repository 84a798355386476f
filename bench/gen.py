"""Seeded input generator for the benchmark suite (Python stdlib only).

Writes one text file per benchmark (whitespace-separated numbers, '#' comments) into a data directory,
plus ``sizes.json`` recording the sizes it was made with; the runner regenerates when those differ.

    python3 bench/gen.py [--quick] [--out bench/data]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "data"
SEED = 20260101
FORMAT_VERSION = 1

SIZES = {
    "full": {
        "gmm": {"d": 10, "K": 25, "n": 1000},
        "ba": {"cams": 21, "points": 11315, "obs": 36455},
        "lstm": {"layers": 2, "c": 1024, "b": 14},
        "hand": {"vertices": 500},
        "ode": {"bodies": 8, "steps": 400},
        "fft": {"log2n": 13},
        "mlp": {"batch": 256, "inputs": 64, "hidden": 128, "outputs": 16},
        "mlp_blas": {"batch": 256, "inputs": 64, "hidden": 128, "outputs": 16},
        "heat": {"n": 128, "steps": 100},
    },
    "quick": {
        "gmm": {"d": 3, "K": 4, "n": 20},
        "ba": {"cams": 3, "points": 20, "obs": 60},
        "lstm": {"layers": 2, "c": 8, "b": 5},
        "hand": {"vertices": 60},
        "ode": {"bodies": 3, "steps": 20},
        "fft": {"log2n": 5},
        "mlp": {"batch": 4, "inputs": 3, "hidden": 5, "outputs": 2},
        "mlp_blas": {"batch": 4, "inputs": 3, "hidden": 5, "outputs": 2},
        "heat": {"n": 6, "steps": 4},
    },
}

BENCHMARKS = tuple(SIZES["full"])


#: benchmarks that are another build of a benchmark's source: (source, extra enzcc arguments); their data is the
#: other's (same seed)
VARIANTS = {"mlp_blas": ("mlp", ["-DUSE_BLAS", "-lopenblas"])}


def rng_for(name: str) -> random.Random:
    name = VARIANTS.get(name, (name,))[0]
    return random.Random(SEED ^ zlib.crc32(name.encode()))


class Writer:
    """Collects lines of numbers; floats with 17 significant digits (exact round trip)."""

    def __init__(self, title: str):
        self.lines = [f"# {title}"]

    def comment(self, text: str) -> None:
        self.lines.append(f"# {text}")

    def ints(self, *values: int) -> None:
        self.lines.append(" ".join(str(int(v)) for v in values))

    def floats(self, values, per_line: int = 8) -> None:
        values = list(values)
        for i in range(0, len(values), per_line):
            self.lines.append(" ".join(f"{v:.17g}" for v in values[i:i + per_line]))

    def save(self, path: Path) -> None:
        path.write_text("\n".join(self.lines) + "\n")


# ---------------------------------------------------------------------------------------------
# GMM: d K n / gamma m / alphas / means / icf / points


def gen_gmm(r: random.Random, d: int, K: int, n: int) -> Writer:
    w = Writer(f"gmm d={d} K={K} n={n}")
    w.comment("d K n")
    w.ints(d, K, n)
    w.comment("wishart gamma, m")
    w.lines.append("1.0 0")
    icf_sz = d * (d + 1) // 2
    w.comment("alphas[K]")
    w.floats(r.gauss(0, 1) for _ in range(K))
    w.comment("means[K][d]")
    w.floats(r.uniform(-1, 1) for _ in range(K * d))
    w.comment("icf[K][d + d(d-1)/2]: log diagonal, then the strict lower triangle by columns")
    icf = []
    for _ in range(K):
        icf += [r.gauss(0, 0.2) for _ in range(d)]
        icf += [r.gauss(0, 0.1) for _ in range(icf_sz - d)]
    w.floats(icf)
    w.comment("x[n][d]")
    w.floats(r.gauss(0, 1) for _ in range(n * d))
    return w


# ---------------------------------------------------------------------------------------------
# BA: ncams npoints nobs / cams / points / weights / obs (cam point fx fy)


def rodrigues(rot, pt):
    th2 = sum(v * v for v in rot)
    if th2 == 0:
        return [pt[0] + rot[1] * pt[2] - rot[2] * pt[1], pt[1] + rot[2] * pt[0] - rot[0] * pt[2],
                pt[2] + rot[0] * pt[1] - rot[1] * pt[0]]
    th = math.sqrt(th2)
    c, s = math.cos(th), math.sin(th)
    u = [v / th for v in rot]
    cr = [u[1] * pt[2] - u[2] * pt[1], u[2] * pt[0] - u[0] * pt[2], u[0] * pt[1] - u[1] * pt[0]]
    dt = sum(a * b for a, b in zip(u, pt)) * (1 - c)
    return [pt[i] * c + cr[i] * s + u[i] * dt for i in range(3)]


def project(cam, X):
    y = rodrigues(cam[0:3], [X[i] - cam[3 + i] for i in range(3)])
    px, py = y[0] / y[2], y[1] / y[2]
    rsq = px * px + py * py
    dist = 1 + cam[9] * rsq + cam[10] * rsq * rsq
    return [px * dist * cam[6] + cam[7], py * dist * cam[6] + cam[8]]


def gen_ba(r: random.Random, cams: int, points: int, obs: int) -> Writer:
    w = Writer(f"ba cams={cams} points={points} obs={obs}")
    w.comment("ncams npoints nobs")
    w.ints(cams, points, obs)
    cam = []
    for _ in range(cams):
        cam.append([r.gauss(0, 0.1), r.gauss(0, 0.1), r.gauss(0, 0.1),  # angle-axis rotation
                    r.uniform(-1, 1), r.uniform(-1, 1), -10 + r.uniform(-1, 1),  # center
                    r.uniform(0.9, 1.1),  # focal length
                    r.gauss(0, 0.01), r.gauss(0, 0.01),  # principal point
                    r.gauss(0, 0.05), r.gauss(0, 0.01)])  # radial distortion k1 k2
    pts = [[r.uniform(-2, 2), r.uniform(-2, 2), r.uniform(-1, 1)] for _ in range(points)]
    w.comment("cams[ncams][11]: rotation(3) center(3) focal(1) principal point(2) distortion(2)")
    w.floats((v for c in cam for v in c), 11)
    w.comment("points[npoints][3]")
    w.floats((v for p in pts for v in p), 9)
    w.comment("weights[nobs]")
    w.floats(r.uniform(0.8, 1.2) for _ in range(obs))
    w.comment("obs[nobs]: camera point feature_x feature_y")
    for i in range(obs):
        c = r.randrange(cams)
        p = i if i < points else r.randrange(points)  # every point seen at least once
        f = project(cam[c], pts[p])
        w.lines.append(f"{c} {p} {f[0] + r.gauss(0, 0.01):.17g} {f[1] + r.gauss(0, 0.01):.17g}")
    return w


# ---------------------------------------------------------------------------------------------
# LSTM: layers c b / main_params / extra_params / state / sequence (one-hot characters)


def gen_lstm(r: random.Random, layers: int, c: int, b: int) -> Writer:
    w = Writer(f"lstm layers={layers} c={c} b={b}")
    w.comment("layers c b")
    w.ints(layers, c, b)
    w.comment("main_params[layers][2][4 b]: weights then biases of each layer")
    w.floats(r.uniform(-1, 1) for _ in range(layers * 2 * 4 * b))
    w.comment("extra_params[3][b]: input weight, output weight, output bias")
    w.floats(r.uniform(-1, 1) for _ in range(3 * b))
    w.comment("state[layers][2][b]: hidden, cell")
    w.floats(r.uniform(-1, 1) for _ in range(layers * 2 * b))
    w.comment("sequence[c]: characters in [0, b)")
    w.ints(*(r.randrange(b) for _ in range(c)))
    return w


# ---------------------------------------------------------------------------------------------
# hand: a synthetic skinned hand: 22 bones (forearm, palm, 5 fingers x 4), vertices, dense weights


def mat_mul(a, b):
    """3x4 rigid transforms (row-major lists of 12) composed: a * b."""
    out = [0.0] * 12
    for i in range(3):
        for j in range(4):
            s = sum(a[4 * i + k] * b[4 * k + j] for k in range(3))
            out[4 * i + j] = s + (a[4 * i + 3] if j == 3 else 0.0)
    return out


def rigid_inverse(a):
    out = [0.0] * 12
    for i in range(3):
        for j in range(3):
            out[4 * i + j] = a[4 * j + i]
    for i in range(3):
        out[4 * i + 3] = -sum(out[4 * i + k] * a[4 * k + 3] for k in range(3))
    return out


def euler_zyx(x, y, z, t=(0.0, 0.0, 0.0)):
    """Rz(z) Ry(y) Rx(x) with translation t, as a 3x4 row-major transform (the C code uses the same)."""
    cx, sx, cy, sy, cz, sz = math.cos(x), math.sin(x), math.cos(y), math.sin(y), math.cos(z), math.sin(z)
    return [cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx, t[0],
            sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx, t[1],
            -sy, cy * sx, cy * cx, t[2]]


def apply(m, p):
    return [m[4 * i] * p[0] + m[4 * i + 1] * p[1] + m[4 * i + 2] * p[2] + m[4 * i + 3] for i in range(3)]


def gen_hand(r: random.Random, vertices: int) -> Writer:
    nb = 22
    parent = [-1, 0] + [0] * 20
    rel = [euler_zyx(0, 0, 0), euler_zyx(0, 0, 0, (0, 1.0, 0))]
    length = [1.0, 0.9] + [0.0] * 20
    for f in range(5):
        spread = -0.6 + 0.3 * f if f else -0.9  # the thumb stands out
        scale = 0.7 if f == 0 else 1.0 - 0.06 * abs(f - 2)
        for j, seg in enumerate((0.8, 0.45, 0.3, 0.25)):
            b = 2 + 4 * f + j
            parent[b] = 1 if j == 0 else b - 1
            if j == 0:
                rel.append(euler_zyx(r.gauss(0, 0.05), 0, -spread * 0.4, (-0.45 + 0.22 * f, 0.1, 0)))
            else:
                prev = length[b - 1]
                rel.append(euler_zyx(r.gauss(0, 0.05), 0, r.gauss(0, 0.05), (0, prev, 0)))
            length[b] = seg * scale
    absolute = []
    for b in range(nb):
        absolute.append(rel[b] if parent[b] < 0 else mat_mul(absolute[parent[b]], rel[b]))
    inv_abs = [rigid_inverse(a) for a in absolute]

    verts, weights = [], [[0.0] * vertices for _ in range(nb)]
    for v in range(vertices):
        b = v % nb
        t = r.random()
        radius = 0.12 if b >= 2 else 0.35
        ang = r.uniform(0, 2 * math.pi)
        local = [radius * math.cos(ang), t * length[b], radius * math.sin(ang)]
        verts.append(apply(absolute[b], local))
        if parent[b] >= 0 and t < 0.3:  # blend with the parent bone near the joint
            wp = (0.3 - t) / 0.6
            weights[parent[b]][v] = wp
            weights[b][v] = 1 - wp
        else:
            weights[b][v] = 1.0
    targets = [[c + r.gauss(0, 0.05) for c in p] for p in verts]
    pose = [r.gauss(0, 0.3) for _ in range(3)] + [r.gauss(0, 0.1) for _ in range(3)]
    pose += [r.uniform(-0.3, 0.6) if k % 4 != 1 else r.gauss(0, 0.1) for k in range(20)]

    w = Writer(f"hand bones={nb} vertices={vertices}")
    w.comment("nbones nvertices")
    w.ints(nb, vertices)
    w.comment("parent[nbones]")
    w.ints(*parent)
    w.comment("base_relative[nbones][3][4]")
    w.floats((x for m in rel for x in m), 12)
    w.comment("inverse_base_absolute[nbones][3][4]")
    w.floats((x for m in inv_abs for x in m), 12)
    w.comment("vertices[nvertices][3]")
    w.floats((x for p in verts for x in p), 9)
    w.comment("weights[nbones][nvertices]")
    w.floats((x for row in weights for x in row), 10)
    w.comment("targets[nvertices][3]")
    w.floats((x for p in targets for x in p), 9)
    w.comment("pose[26]: global rotation (angle-axis 3), translation (3), per finger: flex, abduction, flex, flex")
    w.floats(pose)
    return w


# ---------------------------------------------------------------------------------------------
# ODE: N-body, RK4: bodies steps dt softening / positions / velocities / masses / target positions


def gen_ode(r: random.Random, bodies: int, steps: int) -> Writer:
    w = Writer(f"ode bodies={bodies} steps={steps}")
    w.comment("bodies steps dt softening^2")
    w.lines.append(f"{bodies} {steps} 0.005 0.05")
    w.comment("positions[bodies][3]")
    w.floats(r.uniform(-1, 1) for _ in range(3 * bodies))
    w.comment("velocities[bodies][3]")
    w.floats(r.uniform(-0.3, 0.3) for _ in range(3 * bodies))
    w.comment("masses[bodies]")
    w.floats(r.uniform(0.5, 1.5) for _ in range(bodies))
    w.comment("target positions[bodies][3]")
    w.floats(r.uniform(-1, 1) for _ in range(3 * bodies))
    return w


# ---------------------------------------------------------------------------------------------
# FFT: log2n / x[n] / weights[n]


def gen_fft(r: random.Random, log2n: int) -> Writer:
    n = 1 << log2n
    w = Writer(f"fft n={n}")
    w.comment("log2(n)")
    w.ints(log2n)
    w.comment("x[n] (real input)")
    w.floats(r.gauss(0, 1) for _ in range(n))
    w.comment("spectral weights[n]")
    w.floats(r.uniform(0, 1) for _ in range(n))
    return w


# ---------------------------------------------------------------------------------------------
# MLP: batch inputs hidden outputs / W1 / b1 / W2 / b2 / x / y


def gen_mlp(r: random.Random, batch: int, inputs: int, hidden: int, outputs: int) -> Writer:
    w = Writer(f"mlp batch={batch} inputs={inputs} hidden={hidden} outputs={outputs}")
    w.comment("batch inputs hidden outputs")
    w.ints(batch, inputs, hidden, outputs)
    w.comment("W1[inputs][hidden] b1[hidden] W2[hidden][outputs] b2[outputs]")
    w.floats(r.gauss(0, 1 / inputs ** 0.5) for _ in range(inputs * hidden))
    w.floats(r.gauss(0, 0.1) for _ in range(hidden))
    w.floats(r.gauss(0, 1 / hidden ** 0.5) for _ in range(hidden * outputs))
    w.floats(r.gauss(0, 0.1) for _ in range(outputs))
    w.comment("x[batch][inputs] y[batch][outputs]")
    w.floats(r.gauss(0, 1) for _ in range(batch * inputs))
    w.floats(r.gauss(0, 1) for _ in range(batch * outputs))
    return w


# ---------------------------------------------------------------------------------------------
# HEAT: n steps dt / u0[n][n] / D / target[n][n]


def gen_heat(r: random.Random, n: int, steps: int) -> Writer:
    w = Writer(f"heat n={n} steps={steps}")
    w.comment("n steps dt")
    w.lines.append(f"{n} {steps} 0.1")
    w.comment("u0[n][n] (initial field), D (diffusion coefficient)")
    w.floats(0.8 * math.sin(0.3 * i) * math.cos(0.2 * j) + r.uniform(-0.2, 0.2) for i in range(n) for j in range(n))
    w.floats([0.2])
    w.comment("target[n][n]")
    w.floats(r.uniform(-0.5, 0.5) for _ in range(n * n))
    return w


GENERATORS = {"gmm": gen_gmm, "ba": gen_ba, "lstm": gen_lstm, "hand": gen_hand, "ode": gen_ode, "fft": gen_fft,
              "mlp": gen_mlp, "mlp_blas": gen_mlp, "heat": gen_heat}


def stamp(mode: str) -> dict:
    return {"format": FORMAT_VERSION, "seed": SEED, "mode": mode, "sizes": SIZES[mode]}


def up_to_date(out: Path, mode: str) -> bool:
    try:
        if json.loads((out / "sizes.json").read_text()) != stamp(mode):
            return False
    except (OSError, ValueError):
        return False
    return all((out / f"{name}.txt").is_file() for name in BENCHMARKS)


def generate(out: Path, mode: str = "full", quiet: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sizes.json").unlink(missing_ok=True)
    for name in BENCHMARKS:
        GENERATORS[name](rng_for(name), **SIZES[mode][name]).save(out / f"{name}.txt")
        if not quiet:
            print(f"wrote {out / (name + '.txt')}")
    (out / "sizes.json").write_text(json.dumps(stamp(mode), indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (for the tests)")
    ap.add_argument("--out", type=Path, default=None, help="data directory (default bench/data, or bench/data/quick)")
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    out = args.out or (DEFAULT_OUT / "quick" if args.quick else DEFAULT_OUT)
    generate(out, mode)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
