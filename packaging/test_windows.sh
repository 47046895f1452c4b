#!/usr/bin/env bash
# Build the Windows installer, then try it as a new user would, under Wine in a fresh
# prefix: silent install for all users (C:\Program Files\Multimodal Forge; the launchers
# and python.exe declare longPathAware), --version, the demo, a convert + verify + chat of
# the demo's tiny checkpoint, the GUI self-test offscreen and in a window under Xvfb
# (screenshots at 1366x768), silent uninstall, and a check that nothing is left but the
# user's packages and conversations; then a per-user install without admin
# (/CurrentUser), --version, uninstall. Prints timings.
#
# Usage (as root, for apt): bash packaging/test_windows.sh   (SKIP_BUILD=1 reuses dist/)
# Needs: apt (wine, wine64, nsis, gcc-mingw-w64-x86-64, xvfb, imagemagick, ...: installed here when
# missing) and the package registry (PyPI) for the build.
#
# Wine 8 (Debian 12) is not Windows 10. What stands in for what it lacks is TEST ONLY:
# built by packaging/windows/wine/build_stubs.sh into the test's prefix
# (C:\windows\system32), never into the installer:
#   ucrtbase.dll (+ ucrtwine.dll)  C99 complex math numpy 2 calls (crealf, cexp, cpow, ...
#                                  are stubs in Wine 8's ucrtbase); the rest forwarded
#                                  to Wine's own ucrtbase
#   bcryptprimitives.dll           ProcessPrng (Rust >= 1.78: tokenizers, onnxruntime-genai)
#   icuuc.dll                      the ICU converter functions Qt6Core imports
# and set in the environment: KMP_AFFINITY=disabled (torch's OpenMP calls
# GetNumaNodeProcessorMaskEx, missing in Wine 8), WINEDLLOVERRIDES preferring Microsoft's
# msvcp140/vcruntime140 DLLs the installer ships (Wine's own msvcp140 deadlocks in
# onnxruntime-genai) and the ucrtbase stand-in. Under Wine a regular file as stdout fails
# ([WinError 6]), so every output goes through a pipe.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
installer=dist/mmforge-${version}-windows-x64-setup.exe
work=$root/build/windows-test
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== tools"
need=()
for pair in wine64:wine64 wine:wine makensis:nsis x86_64-w64-mingw32-gcc:gcc-mingw-w64-x86-64 \
  xvfb-run:xvfb xauth:xauth unzip:unzip import:imagemagick; do
  command -v "${pair%%:*}" >/dev/null || [ -x "/usr/lib/wine/${pair%%:*}" ] || need+=("${pair#*:}")
done
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "run as root to install: ${need[*]}" >&2; exit 2; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
wine=$(command -v wine64 || true)
[ -n "$wine" ] || wine=/usr/lib/wine/wine64
wineserver=$(command -v wineserver || echo /usr/lib/wine/wineserver64)
echo "$("$wine" --version)"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  bash packaging/build_windows.sh cpu
fi
[ -f "$installer" ] || fail "no $installer: build first"

echo "== a fresh Wine prefix, with the test-only stand-ins"
export WINEPREFIX=$work/prefix WINEARCH=win64 WINEDEBUG=-all
"$wineserver" -k 2>/dev/null || true
rm -rf "$work" && mkdir -p "$work"
t=$(date +%s)
"$wine" wineboot -i 2>&1 | cat >/dev/null
"$wineserver" -w
echo "prefix in $(elapsed "$t")"
bash packaging/windows/wine/build_stubs.sh "$work/stubs" >/dev/null
system32=$WINEPREFIX/drive_c/windows/system32
cp "$work"/stubs/*.dll "$system32/"
export WINEDLLOVERRIDES="ucrtbase=n,b;msvcp140,msvcp140_1,msvcp140_2,msvcp140_atomic_wait,vcruntime140,vcruntime140_1=n,b"
export KMP_AFFINITY=disabled
export HF_HUB_OFFLINE=1
winuser=$(ls "$WINEPREFIX/drive_c/users" | grep -vx Public | head -1)
local_appdata=$WINEPREFIX/drive_c/users/$winuser/AppData/Local
data=$local_appdata/mmforge

# Run a Windows program, its output piped (a file as stdout fails under Wine); its exit code.
run() {
  local code
  set +e
  "$wine" "$@" 2>&1 | sed -u 's/\r$//'
  code=${PIPESTATUS[0]}
  set -e
  return "$code"
}
# A Windows path for a Linux one.
winpath() { "$wine" winepath -w "$1" 2>/dev/null | tr -d '\r'; }

echo "== silent install for all users"
t=$(date +%s)
run "$root/$installer" /S /AllUsers
"$wineserver" -w
echo "installed in $(elapsed "$t")"
app=$WINEPREFIX/drive_c/Program\ Files/Multimodal\ Forge
for f in mmforge.exe mmforge-gui.exe uninstall.exe python/python.exe python/msvcp140.dll \
  licenses/THIRD-PARTY.txt; do
  [ -f "$app/$f" ] || fail "not installed: $f"
done
for f in ucrtbase.dll ucrtwine.dll bcryptprimitives.dll icuuc.dll; do
  [ ! -e "$app/python/$f" ] || fail "a test-only stand-in is in the install: $f"
done
# The launchers' manifest (packaging/windows/launcher.manifest): paths over MAX_PATH.
aware='<longPathAware xmlns="http://schemas.microsoft.com/SMI/2016/WindowsSettings">true</longPathAware>'
for f in mmforge.exe mmforge-gui.exe python/python.exe; do
  grep -qF "$aware" "$app/$f" || fail "$f does not declare longPathAware in its manifest"
done
[ -f "$WINEPREFIX/drive_c/ProgramData/Microsoft/Windows/Start Menu/Programs/Multimodal Forge.lnk" ] ||
  fail "no Start-menu entry"
key='HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall\mmforge'
run reg query "$key" /v UninstallString | grep -q uninstall.exe || fail "no uninstall entry"
echo "files, manifests, Start-menu entry, uninstall entry: ok ($(du -sh "$app" | cut -f1) installed)"
mmforge='C:\Program Files\Multimodal Forge\mmforge.exe'

echo "== the app"
run "$mmforge" --version | tee "$work/version.txt"
grep -q "mmforge $version" "$work/version.txt" || fail "--version"
t=$(date +%s)
run "$mmforge" demo || fail "demo"
echo "demo in $(elapsed "$t")"
ls "$data"/packages/*/mmforge_manifest.json >/dev/null 2>&1 ||
  fail "no demo package in %LOCALAPPDATA%\\mmforge\\packages"
checkpoint=$(ls -d "$data"/Cache/demo/* | head -1)
[ -d "$checkpoint" ] || fail "no demo checkpoint under %LOCALAPPDATA%\\mmforge\\Cache"
ck=$(winpath "$checkpoint")
out=$(winpath "$data/packages")\\converted
t=$(date +%s)
run "$mmforge" convert "$ck" -o "$out" || fail "convert"
echo "convert in $(elapsed "$t")"
t=$(date +%s)
run "$mmforge" verify "$out" --reference "$ck" --tokens 8 | tee "$work/verify.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "verify"
echo "verify in $(elapsed "$t")"
image=$(winpath "$root/resources/probe.png")
[ -f "$root/resources/probe.png" ] || image=
t=$(date +%s)
run "$mmforge" chat "$out" ${image:+--image "$image"} --prompt "What is in this picture? →" \
  --max-new-tokens 8 --json | tee "$work/chat.json"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "chat"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['token_ids'] or d['text'] is not None" \
  "$work/chat.json" 2>/dev/null || grep -q '"text"' "$work/chat.json" || fail "chat printed no answer"
echo "chat in $(elapsed "$t")"

# A GUI step that fails is reported at the end; the uninstall checks still run.
gui_failed=()
echo "== GUI self-test, offscreen"
# Wine drops every Unix environment variable whose name starts with QT_ (Qt's own
# settings would reach Windows programs otherwise); it passes WINEQT_X on as QT_X.
# Without it Qt takes its Windows platform on Wine's null display driver, where the
# window's close() returns with no close event.
t=$(date +%s)
set +e
WINEQT_QPA_PLATFORM=offscreen timeout 900 "$wine" "$mmforge" gui --self-test 2>&1 | sed -u 's/\r$//'
code=${PIPESTATUS[0]}
set -e
[ "$code" -eq 0 ] || gui_failed+=("offscreen: exit $code")
"$wineserver" -w
echo "GUI self-test (offscreen) in $(elapsed "$t")"

echo "== GUI self-test in a window (Xvfb, Wine's display driver, 1366x768)"
shots=$work/screenshots
mkdir -p "$shots"
# A new user's window: not the size the offscreen run saved (its screen is 800x600).
run reg delete 'HKCU\Software\mmforge' /f >/dev/null 2>&1 || true
# Wine's desktop process must start with the display: a Wine server still running from a
# program started without one left Xvfb's screen black in screen captures.
"$wineserver" -w
t=$(date +%s)
set +e
# The app saves the window at each page (--screenshots); beside each, the whole
# 1366x768 screen as Xvfb shows it (screen-<page>.png: the window with Wine's frame).
cat > "$work/xvfb-self-test.sh" <<'SH'
"$@" &
app=$!
while kill -0 "$app" 2>/dev/null; do
  for shot in "$SHOTS"/*.png; do
    [ -e "$shot" ] || continue
    page=$(basename "$shot")
    case $page in screen-*) continue ;; esac
    [ -e "$SHOTS/screen-$page" ] || import -display "$DISPLAY" -window root "$SHOTS/screen-$page" 2>/dev/null || true
  done
  sleep 0.2
done
wait "$app"
SH
timeout 900 env SHOTS="$shots" xvfb-run -a -s "-screen 0 1366x768x24" bash "$work/xvfb-self-test.sh" \
  "$wine" "$mmforge" gui --self-test --screenshots "$(winpath "$shots")" 2>&1 | sed -u 's/\r$//'
code=${PIPESTATUS[0]}
set -e
[ "$code" -eq 0 ] || gui_failed+=("Xvfb: exit $code")
"$wineserver" -w
echo "GUI self-test (Xvfb) in $(elapsed "$t"); screenshots: $(ls "$shots" | tr '\n' ' ')"

echo "== silent uninstall"
mkdir -p "$data/conversations" && echo '{}' > "$data/conversations/kept.json"
t=$(date +%s)
run "$app/uninstall.exe" /S /AllUsers
"$wineserver" -w
echo "uninstalled in $(elapsed "$t")"
[ ! -e "$app" ] || fail "left behind: $(find "$app" | head -5)"
[ ! -e "$WINEPREFIX/drive_c/ProgramData/Microsoft/Windows/Start Menu/Programs/Multimodal Forge.lnk" ] ||
  fail "the Start-menu entry is left"
if run reg query "$key" >/dev/null 2>&1; then fail "the uninstall entry is left"; fi
if run reg query 'HKCU\Software\mmforge' >/dev/null 2>&1; then fail "the app's settings are left"; fi
left=$(ls -A "$data")
[ "$(echo "$left" | tr '\n' ' ')" = "conversations packages " ] ||
  fail "in %LOCALAPPDATA%\\mmforge, expected only conversations and packages, found: $left"
[ -f "$data/conversations/kept.json" ] && [ -d "$data/packages/converted" ] ||
  fail "the user's packages or conversations were removed"
echo "nothing left but the user's packages and conversations: ok"

echo "== per-user install without admin (/CurrentUser)"
run "$root/$installer" /S /CurrentUser
"$wineserver" -w
user_app=$local_appdata/Programs/Multimodal\ Forge
[ -f "$user_app/mmforge.exe" ] || fail "per-user install not in %LOCALAPPDATA%\\Programs"
run reg query 'HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\mmforge' >/dev/null ||
  fail "no per-user uninstall entry"
run "$(winpath "$user_app")\\mmforge.exe" --version | grep -q "mmforge $version" || fail "--version (per user)"
run "$user_app/uninstall.exe" /S
"$wineserver" -w
[ ! -e "$user_app" ] || fail "per-user install left behind"
echo "per-user install and uninstall: ok"

echo "== sizes"
echo "installer $(du -h "$installer" | cut -f1)"
echo "all done in $(elapsed "$t0")"
[ ${#gui_failed[@]} -eq 0 ] || fail "GUI self-test: ${gui_failed[*]}"
echo "PASS"
