#!/usr/bin/env bash
# Installs DLIO (the MLPerf Storage benchmark, dlio-benchmark 2.0.0 from PyPI) into
# the test virtualenv, for its PyTorch loader only: tests/test_dlio.py checks the
# verdict against the accelerator utilisation DLIO reports itself.
#
#   usage: tests/dlio/install.sh VENV        (torch is already there: `make test`)
#
# DLIO declares TensorFlow, NVIDIA DALI, torchvision and torchaudio as dependencies;
# the PyTorch/npz path imports none of them, so it is installed --no-deps with what
# it does import. Two fixes to run it without TensorFlow:
#  - profiler/profiler_factory.py imports TensorFlow's profiler at module level: the
#    import moves into the TensorBoard branch that uses it;
#  - pydftracer must be installed (without it, utility.py's stub Profile class fails
#    at import), and is switched off at run time with DFTRACER_ENABLE=0.
set -euo pipefail
VENV="${1:?usage: $0 VENV}"
PIP="$VENV/bin/pip"

"$PIP" install -q --no-deps 'dlio-benchmark==2.0.0'
# pip warns that the declared dependencies left out are missing: expected, not shown.
"$PIP" install -q hydra-core omegaconf mpi4py h5py pandas psutil Pillow PyYAML numpy \
                  'pydftracer==1.0.2' 2>&1 \
    | { grep -v -e "which is not installed" -e "dependency resolver" -e "dependency conflicts" || true; }

SP="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
F="$SP/dlio_benchmark/profiler/profiler_factory.py"
# Its sources have CRLF line endings: keep the optional \r. Idempotent: the second
# pattern only matches a line that still starts with `return TFProfiler`.
sed -i \
  -e 's/^from dlio_benchmark\.profiler\.tf_profiler import TFProfiler\(\r\?\)$/# TFProfiler is imported in the TENSORBOARD branch (iotrace tests\/dlio\/install.sh)\1/' \
  -e 's/^\([ \t]*\)return TFProfiler\.get_instance()\(\r\?\)$/\1from dlio_benchmark.profiler.tf_profiler import TFProfiler; return TFProfiler.get_instance()\2/' \
  "$F"
find "$SP/dlio_benchmark/profiler" -name 'profiler_factory*.pyc' -delete

DFTRACER_ENABLE=0 "$VENV/bin/python" -c '
import dlio_benchmark.main
from dlio_benchmark.data_loader.torch_data_loader import TorchDataLoader
from dlio_benchmark.reader.npz_reader import NPZReader
import mpi4py.MPI'
echo "DLIO installed in $VENV"
