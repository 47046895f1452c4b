#!/usr/bin/env bash
# Build the Linux app bundle, then dist/mmforge_<version>_amd64.deb and the portable
# dist/mmforge-<version>-linux-x86_64.tar.zst (with `cuda`: ..._amd64-cuda.deb and
# ...-linux-x86_64-cuda.tar.zst, built with onnxruntime-genai-cuda).
#
# Usage: bash packaging/build_linux.sh [cpu|cuda] [--bundle-only]
#   --bundle-only  stop after the app folder (build/packaging-<variant>/dist/mmforge) and
#                  its check: what CI builds and runs, without the .deb and the tarball
# Every distribution comes from locks/linux-x86_64-<variant>-build.txt (hashes checked;
# scripts/lock updates it), so a new release on the index changes nothing here.
# Needs: python3 with venv, dpkg-deb, zstd (Debian/Ubuntu). The bundle runs on systems with
# a glibc at least as new as this machine's (printed below).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=cpu bundle_only=""
for arg in "$@"; do
  case "$arg" in
    cpu | cuda) variant=$arg ;;
    --bundle-only) bundle_only=1 ;;
    *) echo "usage: $0 [cpu|cuda] [--bundle-only]" >&2; exit 2 ;;
  esac
done
case "$variant" in
  cpu) suffix="" other="-cuda" ;;
  cuda) suffix="-cuda" other="" ;;
esac
lock=locks/linux-x86_64-$variant-build.txt
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
build=build/packaging-$variant
venv=$build/venv
mkdir -p "$build" dist
start=$(date +%s)

echo "== build environment ($variant)"
# A fresh venv each build: a distribution left from an older lock (or the other variant:
# the CPU and CUDA builds of ONNX Runtime share their import names) never reaches the app.
rm -rf "$venv"
python3 -m venv "$venv"
# The lock is the whole closure (--no-deps); torch 2.13.0+cpu comes from torch's CPU index
# where it answers, else from pip's configured indexes (scripts/venv says more). The CUDA
# variant differs in ONNX Runtime alone (onnxruntime-genai-cuda, onnxruntime-gpu): the app
# shows CUDA where og.is_cuda_available() says so.
torch_index=${MMFORGE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
cpu_index=()
python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=5)" \
  "$torch_index" 2>/dev/null && cpu_index=(--extra-index-url "$torch_index")
"$venv/bin/python" -m pip install --quiet --no-deps --require-hashes "${cpu_index[@]}" -r "$lock"
# A plain (not editable) install, built with the lock's setuptools: the bundle gets mmforge
# as a package, not this checkout.
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation .

echo "== licences"
licenses=$build/licenses
rm -rf "$licenses" && mkdir -p "$licenses"
cp packaging/licenses/NOTICE.txt resources/DejaVuSans-LICENSE.txt "$licenses/"
for text in LGPL-2.1 LGPL-3 GPL-3; do
  cp "/usr/share/common-licenses/$text" "$licenses/$text"  # Debian's base-files has them
done
"$venv/bin/python" packaging/third_party.py "$licenses/THIRD-PARTY.txt"

echo "== pyinstaller"
MMFORGE_LOCK=locks/linux-x86_64-$variant.txt MMFORGE_LICENSES=$(realpath "$licenses") \
  "$venv/bin/pyinstaller" --noconfirm --clean --log-level WARN \
  --distpath "$build/dist" --workpath "$build/work" packaging/mmforge.spec
app=$build/dist/mmforge
# Nothing of the build machine's and nothing the app never runs: bytecode caches, test
# suites and test libraries that wheels ship, torch's tools, Qt's translations (the UI is
# English).
find "$app" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$app/_internal" -type d \( -name tests -o -name test \) -path "*/_internal/*" -prune -exec rm -rf {} +
internal=$app/_internal
find "$internal/torch/bin" -mindepth 1 -maxdepth 1 ! -name torch_shm_manager -exec rm -rf {} +
rm -f "$internal"/torch/lib/lib{aoti_custom_ops,backend_with_compiler,jitbackend_test,torchbind_test}.so
rm -rf "$internal/torch/include" "$internal/torch/share" "$internal/PySide6/Qt/translations"
"$app/mmforge" --version
# Every distribution the lock ships is in the bundle with its data files, or left out on
# purpose (packaging/check_bundle.py lists which and why).
"$venv/bin/python" packaging/check_bundle.py "$app" "locks/linux-x86_64-$variant.txt"
if [ -n "$bundle_only" ]; then
  echo "bundle  $(du -sh "$app" | cut -f1)  ($app), built in $(( $(date +%s) - start )) s"
  exit 0
fi

echo "== .deb"
root=$build/deb-root
rm -rf "$root"
mkdir -p "$root/opt" "$root/usr/bin" "$root/usr/share/applications" \
  "$root/usr/share/icons/hicolor/256x256/apps" "$root/DEBIAN"
cp -a "$app" "$root/opt/mmforge"
ln -s /opt/mmforge/mmforge "$root/usr/bin/mmforge"
install -m 644 packaging/linux/mmforge.desktop "$root/usr/share/applications/mmforge.desktop"
install -m 644 resources/mmforge.png "$root/usr/share/icons/hicolor/256x256/apps/mmforge.png"
size_kb=$(du -sk "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$size_kb/" -e "s/@SUFFIX@/$suffix/" \
  -e "s/@CONFLICT@/$other/" \
  packaging/linux/control.in > "$root/DEBIAN/control"
deb=dist/mmforge_${version}_amd64${suffix}.deb
dpkg-deb --root-owner-group -Zzstd -z19 --build "$root" "$deb" >/dev/null  # about 3 min

echo "== tarball"
tarball=dist/mmforge-${version}-linux-x86_64${suffix}.tar.zst
tar -C "$build/dist" -cf - mmforge | zstd -q -19 -T0 -f -o "$tarball"

echo "== sizes"
echo "bundle  $(du -sh "$app" | cut -f1)  ($app)"
echo "deb     $(du -h "$deb" | cut -f1)  ($deb)"
echo "tarball $(du -h "$tarball" | cut -f1)  ($tarball)"
echo "glibc floor: $(ldd --version | head -1)"
echo "ten biggest contributors:"
du -s "$app"/_internal/* | sort -rn | head -10 | while read -r kb path; do
  printf "  %7s MB  %s\n" "$((kb / 1024))" "${path#"$app"/}"
done
echo "built in $(( $(date +%s) - start )) s"
