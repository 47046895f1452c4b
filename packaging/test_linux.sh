#!/usr/bin/env bash
# Build the .deb and the tarball, then try them as a new user would on a clean Debian 12
# made here (mmdebstrap, minbase: no Python), as a non-root user, offline for the app:
# --version, the demo, the GUI self-test under Xvfb with screenshots, a verify of the demo
# package, removal (nothing left under /opt and /usr); then the same from the tarball in a
# fresh folder and a fresh profile. Prints sizes and timings.
#
# Usage (as root): bash packaging/test_linux.sh        (SKIP_BUILD=1 reuses dist/)
# Needs: mmdebstrap and network access to Debian's package mirror (for the clean system
# and the .deb's Depends), dpkg-deb, zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (chroot, mounts)" >&2; exit 2; }
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' backend/__init__.py)
deb=dist/mmforge_${version}_amd64.deb
tarball=dist/mmforge-${version}-linux-x86_64.tar.zst
work=$(realpath -m build/debian-test)
base=$work/base
root=$work/root
shots=$work/screenshots
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  bash packaging/build_linux.sh cpu
fi
[ -f "$deb" ] && [ -f "$tarball" ] || { echo "no $deb or $tarball: build first" >&2; exit 1; }

echo "== a clean Debian 12 (bookworm, minbase)"
if [ ! -x "$base/bin/sh" ]; then
  mkdir -p "$work"
  mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm "$base"
fi
umount_all() {
  for m in dev/shm dev/pts dev sys proc; do
    mountpoint -q "$root/$m" && umount -l "$root/$m"
  done
  return 0
}
trap umount_all EXIT
umount_all
rm -rf "$root" && cp -a "$base" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t devpts devpts "$root/dev/pts" -o newinstance,ptmxmode=0666 || true
mount -t tmpfs tmpfs "$root/dev/shm"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
as_user() {
  local user=$1
  shift
  chroot --userspec="$user:$user" "$root" /usr/bin/env -i PATH=/usr/bin:/bin \
    HOME="/home/$user" USER="$user" LANG=C.UTF-8 HF_HUB_OFFLINE=1 "$@"
}
in_root apt-get update -qq
# The test's own tools (a virtual display, zstd for the tarball); nothing of Python.
in_root apt-get install -y -qq --no-install-recommends xvfb xauth zstd >/dev/null

echo "== install the .deb (apt resolves its Depends)"
cp "$deb" "$root/tmp/mmforge.deb"
t=$(date +%s)
in_root apt-get install -y -qq --no-install-recommends /tmp/mmforge.deb >/dev/null
echo "installed in $(elapsed "$t")"
if in_root sh -c 'command -v python3 || command -v python || ls /usr/lib/python3*' 2>/dev/null; then
  echo "FAIL: the clean system has Python" >&2
  exit 1
fi
echo "no Python in the system: ok"
in_root useradd -m tester
in_root useradd -m tarball

echo "== as a non-root user"
as_user tester mmforge --version
t=$(date +%s)
as_user tester mmforge demo
echo "demo in $(elapsed "$t")"
t=$(date +%s)
as_user tester sh -c 'MMFORGE_QUIT_WHEN_SHOWN=1 xvfb-run -a -s "-screen 0 1280x820x24" mmforge gui'
echo "start to window (Xvfb start included): $(elapsed "$t")"
t=$(date +%s)
as_user tester xvfb-run -a -s "-screen 0 1280x820x24" \
  mmforge gui --self-test --screenshots /home/tester/screenshots
echo "GUI self-test in $(elapsed "$t")"
rm -rf "$shots" && cp -r "$root/home/tester/screenshots" "$shots"
echo "screenshots: $(ls "$shots" | tr '\n' ' ')in $shots"
demo_pkg=/home/tester/.local/share/mmforge/packages/Qwen2.5-VL-demo
demo_ck=$(as_user tester sh -c 'ls -d /home/tester/.cache/mmforge/demo/* | head -1')
t=$(date +%s)
as_user tester mmforge verify "$demo_pkg" --reference "$demo_ck" --tokens 8
echo "verify in $(elapsed "$t")"

echo "== remove the package"
in_root apt-get remove --purge -y -qq mmforge >/dev/null
left=$(in_root sh -c 'find /opt /usr -name "*mmforge*" 2>/dev/null' || true)
if [ -n "$left" ]; then
  echo "FAIL: left behind: $left" >&2
  exit 1
fi
echo "nothing left under /opt and /usr: ok"

echo "== the tarball, in a fresh folder, fresh profile"
cp "$tarball" "$root/tmp/mmforge.tar.zst"
chmod 644 "$root/tmp/mmforge.tar.zst"
as_user tarball sh -c 'mkdir -p ~/apps && cd ~/apps && zstd -dc /tmp/mmforge.tar.zst | tar -xf -'
as_user tarball /home/tarball/apps/mmforge/mmforge --version
t=$(date +%s)
as_user tarball /home/tarball/apps/mmforge/mmforge demo >/dev/null
echo "demo from the tarball in $(elapsed "$t")"
as_user tarball sh -c 'rm -rf ~/apps'

echo "== sizes"
echo "deb     $(du -h "$deb" | cut -f1)"
echo "tarball $(du -h "$tarball" | cut -f1)"
echo "all done in $(elapsed "$t0")"
