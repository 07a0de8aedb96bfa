#!/usr/bin/env bash
# One-time set-up of the peers of `taskgrain bench peers`:
#   1. a Python venv at bench/peers/.venv with the pinned requirements
#      (numpy, scipy, onnxruntime, onnx, jax[cpu]; then torch, optional),
#   2. the ONNX graphs in bench/peers/models (make_models.py),
#   3. the Rust peers binary: cargo build --release -p taskgrain-peers
#      (candle, rten, and onnxruntime through its C API, loading the
#      libonnxruntime shared library that ships inside the onnxruntime wheel).
# Usage: bench/peers/setup.sh [--no-torch] [--no-rust]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
torch=1
rust=1
for a in "$@"; do
    case "$a" in
        --no-torch) torch=0 ;;
        --no-rust) rust=0 ;;
        *) echo "usage: $0 [--no-torch] [--no-rust]" >&2; exit 2 ;;
    esac
done
python="${PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
    echo "setup.sh: $python not found; install Python 3.10+ (or set PYTHON=...)" >&2
    exit 1
fi
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
    echo "== creating $venv"
    "$python" -m venv "$venv"
fi
echo "== installing $here/requirements.txt"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
if [ "$torch" = 1 ]; then
    echo "== installing $here/requirements-torch.txt (large; --no-torch skips it)"
    if ! "$venv/bin/python" -m pip install --quiet -r "$here/requirements-torch.txt"; then
        echo "setup.sh: torch did not install; the torch column will show — with the reason" >&2
    fi
fi
echo "== writing the ONNX graphs to $here/models"
"$venv/bin/python" "$here/make_models.py" "$here/models"
if [ "$rust" = 1 ]; then
    echo "== building the Rust peers (candle, rten, onnxruntime C API)"
    (cd "$root" && cargo build --release -p taskgrain-peers)
fi
echo "== checking"
"$venv/bin/python" - <<'PY'
import importlib
for m in ("numpy", "scipy", "onnxruntime", "jax", "torch"):
    try:
        mod = importlib.import_module(m)
        print(f"  {m} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"  {m}: not available ({type(e).__name__}: {e})")
PY
lib="$(ls "$venv"/lib/python*/site-packages/onnxruntime/capi/libonnxruntime.so* 2>/dev/null | head -1 || true)"
echo "  libonnxruntime: ${lib:-not found}"
echo "done: run  cargo run --release -- bench peers  (or target/release/taskgrain bench peers)"
