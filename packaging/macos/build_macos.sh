#!/usr/bin/env bash
# macOS on Apple silicon: the .app bundle and a dmg. Not run on the Linux build machines;
# run on macOS 14+ (torch 2.13's macOS wheels are arm64 for 14.0 and later) with Python 3.11
# from python.org. Every distribution comes from locks/macos-arm64-build.txt (hashes
# checked; scripts/lock updates it).
#
#   bash packaging/macos/build_macos.sh   ->  dist/mmforge-<version>-macos-<arch>.dmg
#
# The app is not signed or notarized here: set CODESIGN_IDENTITY to sign it with
# `codesign --deep --options runtime`, then notarize the dmg with `xcrun notarytool`.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
build=build/packaging-macos
rm -rf "$build/venv"
python3.11 -m venv "$build/venv"
"$build/venv/bin/python" -m pip install --quiet --no-deps --require-hashes \
  -r locks/macos-arm64-build.txt
"$build/venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation .
mkdir -p "$build/licenses"
cp packaging/licenses/NOTICE.txt resources/DejaVuSans-LICENSE.txt "$build/licenses/"
"$build/venv/bin/python" packaging/third_party.py "$build/licenses/THIRD-PARTY.txt"
MMFORGE_LOCK=locks/macos-arm64.txt MMFORGE_LICENSES=$(cd "$build/licenses" && pwd) \
  "$build/venv/bin/pyinstaller" --noconfirm --clean \
  --distpath "$build/dist" --workpath "$build/work" packaging/mmforge.spec
app="$build/dist/Multimodal Forge.app"
"$build/venv/bin/python" packaging/check_bundle.py "$app" locks/macos-arm64.txt
if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  codesign --deep --force --options runtime --sign "$CODESIGN_IDENTITY" "$app"
fi
mkdir -p dist
dmg="dist/mmforge-${version}-macos-$(uname -m).dmg"
hdiutil create -volname "Multimodal Forge" -srcfolder "$app" -ov -format UDZO "$dmg"
echo "built $dmg"
