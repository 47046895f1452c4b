#!/usr/bin/env bash
# Build the Linux app bundle, then dist/mmforge_<version>_amd64.deb and the portable
# dist/mmforge-<version>-linux-x86_64.tar.zst (with `cuda`: ..._amd64-cuda.deb and
# ...-linux-x86_64-cuda.tar.zst, built with onnxruntime-genai-cuda).
#
# Usage: bash packaging/build_linux.sh [cpu|cuda]
# Needs: python3 with venv, dpkg-deb, zstd (Debian/Ubuntu). The bundle runs on systems with
# a glibc at least as new as this machine's (printed below).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-cpu}
case "$variant" in
  cpu) suffix="" other="-cuda" ;;
  cuda) suffix="-cuda" other="" ;;
  *) echo "usage: $0 [cpu|cuda]" >&2; exit 2 ;;
esac
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
build=build/packaging-$variant
venv=$build/venv
mkdir -p "$build" dist
start=$(date +%s)

echo "== build environment ($variant)"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# A plain (not editable) install: the bundle gets mmforge as a package, not this checkout.
"$venv/bin/python" -m pip install --quiet . "pyinstaller==6.22.3"
if [ "$variant" = cuda ]; then
  # Same API, CUDA kernels: the app shows CUDA where og.is_cuda_available() says so.
  # The CPU and CUDA wheels share their import names: remove all four, then install the
  # CUDA pair, so no file of one is left in the other's place.
  "$venv/bin/python" -m pip uninstall --quiet --yes onnxruntime-genai onnxruntime \
    onnxruntime-genai-cuda onnxruntime-gpu
  "$venv/bin/python" -m pip install --quiet "onnxruntime-genai-cuda>=0.18" "onnxruntime-gpu>=1.22"
fi

echo "== licences"
licenses=$build/licenses
rm -rf "$licenses" && mkdir -p "$licenses"
cp packaging/licenses/NOTICE.txt resources/DejaVuSans-LICENSE.txt "$licenses/"
for text in LGPL-2.1 LGPL-3 GPL-3; do
  cp "/usr/share/common-licenses/$text" "$licenses/$text"  # Debian's base-files has them
done
"$venv/bin/python" packaging/third_party.py "$licenses/THIRD-PARTY.txt"

echo "== pyinstaller"
MMFORGE_LICENSES=$(realpath "$licenses") "$venv/bin/pyinstaller" --noconfirm --clean --log-level WARN \
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
