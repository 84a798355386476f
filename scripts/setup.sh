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

if ! "$PYTHON" -c 'import enzcc, llvmlite, click, rich, tomli, yaml, pytest' 2>/dev/null \
   || ! "$PYTHON" -c 'import llvmlite, sys; sys.exit(llvmlite.__version__[:4] != "0.50")' 2>/dev/null \
   || ! command -v enzcc >/dev/null; then
  echo "setup: installing Python packages and enzcc"
  "$PYTHON" -m pip install -q --disable-pip-version-check 'llvmlite>=0.50,<0.51' click rich tomli pyyaml pytest
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation -e .
fi
