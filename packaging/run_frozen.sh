#!/usr/bin/env bash
# Run a built app folder as a new user would: `--version`, the offline demo (inspect,
# convert and a chat turn) and the GUI self-test under Xvfb, in a fresh profile (its own
# home, XDG folders and Hugging Face cache) with the hub offline. CI runs this on the
# bundle packaging/build_linux.sh --bundle-only makes.
#
# Usage: bash packaging/run_frozen.sh APP_FOLDER      (needs xvfb-run: scripts/setup-system)
set -euo pipefail
[ $# -eq 1 ] && [ -x "$1/mmforge" ] || { echo "usage: $0 APP_FOLDER (with mmforge in it)" >&2; exit 2; }
app=$(realpath "$1")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
run() {
  env -i PATH=/usr/bin:/bin HOME="$profile" LANG=C.UTF-8 HF_HUB_OFFLINE=1 \
    XDG_CONFIG_HOME="$profile/config" XDG_DATA_HOME="$profile/data" \
    XDG_CACHE_HOME="$profile/cache" XDG_STATE_HOME="$profile/state" \
    HF_HOME="$profile/hf" TMPDIR="$profile" "$@"
}
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

echo "== frozen app: --version"
run "$app/mmforge" --version
echo "== frozen app: demo"
t=$(date +%s)
run "$app/mmforge" demo
echo "frozen demo passed in $(elapsed "$t")"
echo "== frozen app: GUI self-test (Xvfb)"
t=$(date +%s)
run xvfb-run -a -s "-screen 0 1366x768x24" "$app/mmforge" gui --self-test
echo "frozen GUI self-test passed in $(elapsed "$t")"
