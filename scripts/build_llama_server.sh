#!/usr/bin/env bash
# Builds llama.cpp's own server (llama-server) from the llama.cpp that llama-cpp-python's source distribution
# vendors, CPU only, and installs it into the active virtualenv's bin/. The same unpacked source holds the
# converter `python -m laya_robustness fixtures gguf` runs (laya_robustness/recipes/gguf.py), so the GGUF files
# and the server that reads them are one llama.cpp.
#
# Lean: only the llama-server target, Release, static, no tests, examples, web UI, OpenSSL or downloads, and
# GGML_NATIVE=OFF: a fixed instruction set (SSE4.2, AVX, AVX2, FMA, F16C, BMI2; no AVX-512 even where the CPU has
# it), so every x86-64 machine with AVX2 runs the same kernels, rather than what -march=native finds on the
# machine that built it. Kept between runs under ${XDG_CACHE_HOME:-~/.cache}/laya-robustness: the source is
# fetched once (pip's own cache keeps the download), and a second run rebuilds nothing (seconds).
# Measured on 2 cores (-j2): about 7.5 minutes from nothing (47 s fetching the 76 MB source, 6.6 minutes
# compiling), 0.5 s when it is built.
set -euo pipefail

VERSION=0.3.36  # laya_robustness.recipes.gguf.LLAMA_CPP_PYTHON
JOBS=${JOBS:-2}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/laya-robustness"
SOURCE="$CACHE/llama-cpp-python-$VERSION"
BUILD="$CACHE/llama-server-build-$VERSION"
PREFIX="$(python -c 'import sys; print(sys.prefix)')"

mkdir -p "$CACHE"
if [ ! -f "$SOURCE/vendor/llama.cpp/CMakeLists.txt" ]; then
    download="$(mktemp -d)"
    python -m pip download --quiet --no-deps --no-binary :all: -d "$download" "llama-cpp-python==$VERSION"
    rm -rf "$SOURCE.partial" && mkdir -p "$SOURCE.partial"
    tar -xzf "$download/llama_cpp_python-$VERSION.tar.gz" -C "$SOURCE.partial" --strip-components 1
    rm -rf "$download" "$SOURCE" && mv "$SOURCE.partial" "$SOURCE"
fi

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S "$SOURCE/vendor/llama.cpp" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$BUILD.configure.log" 2>&1 \
    || { cat "$BUILD.configure.log"; exit 1; }
cmake --build "$BUILD" --target llama-server -j "$JOBS" > "$BUILD.log" 2>&1 || { tail -50 "$BUILD.log"; exit 1; }
install -m 755 "$BUILD/bin/llama-server" "$PREFIX/bin/llama-server"
echo "llama-server (llama-cpp-python $VERSION's llama.cpp) in $PREFIX/bin; llama.cpp's source in $SOURCE/vendor/llama.cpp"
