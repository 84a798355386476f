#!/usr/bin/env bash
# Installs what enzcc needs on a fresh Debian machine (only what is missing), then enzcc itself.
set -euo pipefail
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."

# Debian package -> a file it installs
declare -A PKGS=(
  [clang-22]=/usr/bin/clang-22
  [lld-22]=/usr/bin/ld.lld-22
  [flang-22]=/usr/bin/flang-22
  [libflang-22-dev]=/usr/lib/llvm-22/lib/clang/22/lib/x86_64-pc-linux-gnu/libflang_rt.runtime.a
  [llvm-22]=/usr/bin/llvm-objcopy-22
  [mlir-22-tools]=/usr/bin/mlir-translate-22
  [libeigen3-dev]=/usr/include/eigen3/Eigen/Dense
  [libopenblas-dev]=/usr/include/x86_64-linux-gnu/cblas.h
  [libomp-22-dev]=/usr/lib/llvm-22/lib/libomp.so
  [libopenmpi-dev]=/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
  [openmpi-bin]=/usr/bin/mpirun
  [ninja-build]=/usr/bin/ninja
)
missing=()
for pkg in "${!PKGS[@]}"; do
  [ -e "${PKGS[$pkg]}" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v rustc >/dev/null && [ ! -x "$HOME/.cargo/bin/rustc" ]; then
  echo "setup: note: rustc not found; Rust sources will not compile (tests that need it are skipped)"
fi
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  # (rustup installs cargo with rustc; Debian's rustc package does not)
  echo "setup: note: cargo not found; RUSTC_WRAPPER=enzcc builds cannot run (tests/test_cargo.py is skipped)"
fi

here=$(pwd)
if ! "$PYTHON" -c 'import enzcc, enzcc_plugins, llvmlite, click, rich, tomli, yaml, pytest' 2>/dev/null \
   || [ "$("$PYTHON" -c 'import enzcc, os; print(os.path.dirname(os.path.dirname(os.path.abspath(enzcc.__file__))))' 2>/dev/null)" != "$here" ] \
   || ! "$PYTHON" -c 'import llvmlite, sys; sys.exit(llvmlite.__version__[:4] != "0.50")' 2>/dev/null \
   || ! command -v enzcc >/dev/null; then
  echo "setup: installing Python packages and enzcc"
  "$PYTHON" -m pip install -q --disable-pip-version-check 'llvmlite>=0.50,<0.51' click rich tomli pyyaml pytest \
    'setuptools>=70.1' wheel
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation -e .
fi
# enzcc and enzcc++ as launchers that start Python without `site` until a link needs llvmlite: a drop-in
# build starts enzcc once per source file (enzcc/launcher.py)
"$PYTHON" -m enzcc.launcher >/dev/null || echo "setup: note: enzcc's launchers were not written; enzcc starts more slowly" >&2
# enzcc's modules byte-compiled, also where PYTHONDONTWRITEBYTECODE keeps Python from writing them: compiling them
# from source again on every call costs a small compile about 20 ms
"$PYTHON" -m compileall -q enzcc >/dev/null || echo "setup: note: enzcc's modules were not byte-compiled" >&2
# meson (and ninja, above) for the meson project of tests/test_projects.py
if ! command -v meson >/dev/null; then
  "$PYTHON" -m pip install -q --disable-pip-version-check meson \
    || echo "setup: warning: installing meson failed; the meson project test will be skipped" >&2
fi

# Optional (ENZCC_WITH_FRAMEWORKS=1): PyTorch, JAX and TensorFlow for the Python integrations' tests
# (the plugin tests skip a framework that is missing, so a failure here is only a warning).
# torch is the CPU build that pip's find-links cache holds (torch-2.13.0+cpu); the resolution is checked
# first so that a machine without that cache never downloads CUDA packages (several GB) instead.
if [ "${ENZCC_WITH_FRAMEWORKS:-}" = 1 ]; then
  pipq() { "$PYTHON" -m pip install -q --disable-pip-version-check "$@"; }
  if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    echo "setup: installing torch==2.13.0 (CPU build)"
    report=$(mktemp)
    if ! "$PYTHON" -m pip install -q --disable-pip-version-check --dry-run --report "$report" 'torch==2.13.0' >/dev/null 2>&1; then
      echo "setup: warning: cannot resolve torch==2.13.0; the PyTorch plugin tests will be skipped" >&2
    elif "$PYTHON" - "$report" <<'PY'
import json, sys
names = [i["metadata"]["name"].lower() for i in json.load(open(sys.argv[1]))["install"]]
cuda = [n for n in names if n.startswith(("nvidia-", "triton", "cuda"))]
if cuda:
    print("setup: warning: torch==2.13.0 resolves to a CUDA build here (would pull " + ", ".join(cuda)
          + "); not installing it: the PyTorch plugin tests will be skipped", file=sys.stderr)
sys.exit(1 if cuda else 0)
PY
    then
      pipq 'torch==2.13.0' || echo "setup: warning: installing torch failed; the PyTorch plugin tests will be skipped" >&2
    fi
    rm -f "$report"
  fi
  if ! "$PYTHON" -c 'import jax, jaxlib' 2>/dev/null; then
    echo "setup: installing jax and jaxlib"
    pipq jax jaxlib || echo "setup: warning: installing jax failed; the JAX plugin tests will be skipped" >&2
  fi
  # TensorFlow (CPU wheel) for tests/test_plugins_tf.py. It shares numpy and ml_dtypes with torch and jax:
  # the versions already installed are pinned as constraints, so installing TensorFlow never changes what
  # torch/jax use (with tensorflow-cpu 2.21, jax 0.10.2 and torch 2.13 it only adds protobuf, keras, h5py...).
  if ! "$PYTHON" -c 'import tensorflow' 2>/dev/null; then
    echo "setup: installing tensorflow-cpu==2.21.0"
    pins=$(mktemp)
    "$PYTHON" -m pip freeze 2>/dev/null | grep -iE '^(numpy|ml[-_]dtypes|jax|jaxlib|torch)==' >"$pins" || true
    pipq -c "$pins" 'tensorflow-cpu==2.21.0' \
      || echo "setup: warning: installing tensorflow-cpu failed (or would change numpy/ml_dtypes for torch/jax);" \
              "the TensorFlow plugin tests will be skipped" >&2
    rm -f "$pins"
  fi
fi
