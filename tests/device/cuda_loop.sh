#!/usr/bin/env bash
# The verdict on a CUDA training loop, on a machine with an NVIDIA GPU and a
# Python with torch (CUDA), torchvision, pyarrow, duckdb, click, rich, numpy
# and matplotlib: tests/workloads/jpeg_train.py with the model on the GPU, a
# sync per step (loss.item()) and batches from pinned memory, traced, against
# the loop's own clock around next(). Prints what the machine has, then for
# each set-up the loop's own AU, iotrace's, and the verdict.
#
#   usage: tests/device/cuda_loop.sh [OUT_DIR]   (as root; from the checkout,
#          with build/iotrace-recorder and userspace/iotrace/bin/ built)
set -u
OUT="${1:-/tmp/iotrace-cuda}"
mkdir -p "$OUT"
PY="${PY:-python3}"
# wheels brought along for a machine without network (WHEELS=DIR)
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --target "$OUT/site" "$WHEELS"/*.whl && \
    export PYTHONPATH="$OUT/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
uname -r
"$PY" - <<'PYEOF' || { echo "cuda_loop: the Python packages above are missing: nothing run"; exit 0; }
import importlib, sys
print(sys.version.split()[0])
missing = []
for m in ("torch", "torchvision", "pyarrow", "duckdb", "click", "rich", "numpy", "matplotlib"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        missing.append(f"{m} ({type(e).__name__})")
import torch
print("cuda available:", torch.cuda.is_available())
if missing or not torch.cuda.is_available():
    print("missing:", ", ".join(missing) or "CUDA")
    sys.exit(1)
PYEOF
# libraries brought along (the recorder links libbpf and libelf)
[ -n "${WHEELS:-}" ] && [ -d "$WHEELS/lib" ] && export LD_LIBRARY_PATH="$WHEELS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the package as installed: iotrace with its analyzers and viewers inside
PKG="$OUT/pkg"
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r userspace/iotrace "$PKG/iotrace"
cp -r analyzers "$PKG/iotrace/analyzers"
cp -r viewers "$PKG/iotrace/viewers"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
"$PY" tests/workloads/jpeg_train.py "$OUT/jpegs" --make 480
for setup in "--workers 0" "--workers 2 --pin-memory" "--workers 4 --pin-memory --model-width 256"; do
  name=$(echo "$setup" | tr -d ' -')
  echo "== $setup"
  "$PY" -m iotrace run -q --no-node-summary --force -o "$OUT/t-$name" -- \
      "$PY" tests/workloads/jpeg_train.py "$OUT/jpegs" "$OUT/$name.json" --device cuda \
      --epochs 3 --size 160 $setup
  "$PY" - "$OUT/$name.json" "$OUT/t-$name" <<'PYEOF'
import json, sys
from iotrace import open_trace
from iotrace.analyzers.base import Targets
from iotrace.analyzers.report import build_report
t = json.load(open(sys.argv[1]))
tr = open_trace(sys.argv[2])
v = build_report(tr, Targets()).verdict
k = build_report(open_trace(sys.argv[2]), Targets(), kernel_only=True).verdict
lp = v["loops"][0] if v["loops"] else {}
print(f"own AU {t['au']:.3f} over {t['loop_window_s']:.2f} s | iotrace AU {v['accelerator_utilization']} "
      f"(kernel only {k['accelerator_utilization']}) status {v['status']} | loop tid right: "
      f"{lp.get('tid') == t['tid']}")
print("budget", {x: round(y, 3) for x, y in v["time_budget_s"].items()})
print("stall", v["stall"])
print(v["summary"])
print("py_stacks", {x: tr.meta.get("py_stacks", {}).get(x) for x in ("samples", "read_errors", "error")})
PYEOF
done
