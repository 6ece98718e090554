#!/usr/bin/env bash
# Proof that the wheels install where our users are: a minimal Debian root file system (debootstrap:
# python3 and python3-venv, nothing else; no compiler, no header), and in it a user who is not root
# installs the wheels with pip, as the README's "Install on a cluster" says, and runs the demo: the
# built-in sample prepared, a ResNet-18 trained on it, the metrics. Then the pixels: the pinned-pixel
# test passes there, and the demo's shards and their decoded crops equal the development build's
# (.venv, from jobs/install.sh) byte for byte.
#
#   bash jobs/build_wheels.sh && bash jobs/check_bare_install.sh
#
# Needs root (debootstrap, chroot, mounts), debootstrap, Debian's mirror and PyPI. The root file system
# is kept in build/bare/rootfs between runs (made once, about a minute); the user's home is new each run.
# This machine's pip configuration (CA bundle, constraints, local wheel folders) is carried in.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rootfs=${BARE_ROOTFS:-$root/build/bare/rootfs}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
user=researcher
die() { echo "check_bare_install.sh: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (debootstrap, chroot, mounts); the install inside runs as a user who is not"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt install debootstrap; jobs/install.sh --dev installs it)"
[[ -x .venv/bin/python ]] || die "the development build is missing: bash jobs/install.sh"
project_wheel=$(ls dist/imagenet_slurm-*-cp311-abi3-manylinux_2_28_x86_64.whl 2>/dev/null | tail -1)
simd_wheel=$(ls dist/pillow_simd-*-cp311-cp311-manylinux_2_28_x86_64.whl 2>/dev/null | tail -1)
[[ -n $project_wheel && -n $simd_wheel ]] || die "no x86-64 wheels in dist/: bash jobs/build_wheels.sh"

# --- the bare system ---------------------------------------------------------------------------------
if [[ ! -f $rootfs/.complete ]]; then
  echo "check_bare_install.sh: debootstrap bookworm (minbase + python3, python3-venv) into $rootfs"
  rm -rf "$rootfs" && mkdir -p "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" \
    > "$rootfs.log" 2>&1 || die "debootstrap failed: $rootfs.log"
  touch "$rootfs/.complete"
fi
for absent in usr/bin/cc usr/bin/gcc usr/bin/nasm usr/include/jpeglib.h usr/include/zlib.h usr/include/python3.11/Python.h; do
  [[ ! -e $rootfs/$absent ]] || die "$rootfs is not bare: it has /$absent"
done

mounts=()
cleanup() {
  local i
  for (( i=${#mounts[@]}-1; i>=0; i-- )); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
}
trap cleanup EXIT
mount_at() {  # mount_at TARGET MOUNT-ARGS...: a mount undone on exit
  local target=$1; shift
  mount "$@" "$target" && mounts+=("$target")
}
mount_at "$rootfs/proc" -t proc proc
mount_at "$rootfs/dev/shm" -t tmpfs -o size=4g shm   # the loader's workers share batches there
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"

# This machine's pip configuration, with every file and folder it names mounted read-only at the same place.
: > "$rootfs/etc/pip.conf"
echo "[global]" >> "$rootfs/etc/pip.conf"
# (pip lists the environment's settings first, and they win: the first of each key is kept)
pip config list 2>/dev/null | sed -E "s/^(global|:env:)\.([a-z-]+)='(.*)'$/\2 \3/" | awk '!seen[$1]++' | while read -r key value; do
  [[ $key == disable-pip-version-check || $key == default-timeout ]] && continue
  echo "$key = $value" >> "$rootfs/etc/pip.conf"
done
# (a local index's pages link to ../../files: its parent folder is mounted)
for path in $(sed -n 's/^[a-z-]* = //p' "$rootfs/etc/pip.conf" | tr ' ' '\n' | sed -E 's|^file://||; s|/simple/?$||' | sort -u); do
  [[ -e $path ]] || continue
  if [[ -d $path ]]; then mkdir -p "$rootfs$path"; else mkdir -p "$(dirname "$rootfs$path")"; touch "$rootfs$path"; fi
  mount_at "$rootfs$path" --bind "$path"
  mount -o remount,bind,ro "$rootfs$path"
done

# --- the user, the wheels and what the checks read -------------------------------------------------
grep -q "^$user:" "$rootfs/etc/passwd" || chroot "$rootfs" useradd --create-home --uid 4242 "$user"
home=$rootfs/home/$user
find "$home" -mindepth 1 -delete
mkdir -p "$home/wheels" "$home/check/jobs" "$home/check/tests/data" "$home/check/third_party/libjpeg-turbo"
cp "$project_wheel" "$simd_wheel" "$home/wheels/"
cp jobs/pixels_digest.py "$home/check/jobs/"
cp tests/test_pinned_pixels.py "$home/check/tests/"
cp -r tests/data/pinned "$home/check/tests/data/"
cp third_party/libjpeg-turbo/README.md "$home/check/third_party/libjpeg-turbo/"
chroot "$rootfs" chown -R "$user:$user" "/home/$user"

# --- as the user: README's "Install on a cluster", then the demo --------------------------------------
cat > "$home/steps.sh" <<'EOF'
set -euxo pipefail
cd ~
if command -v cc || command -v gcc; then echo "a compiler is here: not a bare system"; exit 1; fi
python3 -m venv venv
venv/bin/pip install -q wheels/imagenet_slurm-*.whl
venv/bin/pip uninstall -q -y pillow
venv/bin/pip install -q --no-deps wheels/pillow_simd-*.whl
venv/bin/python -m prepare.sample demo/source
venv/bin/python -m prepare --source demo/source --dest demo/imagenet --shard-size 2
venv/bin/python -m train --data demo/imagenet --run-dir demo/run --device cpu --arch resnet18 --image-size 64 \
    --epochs 8 --batch-size 32 --lr 0.8 --warmup-epochs 1
venv/bin/python -m train.report demo/run
venv/bin/python check/jobs/pixels_digest.py demo/imagenet > digest.json
venv/bin/pip install -q pytest
cd check && ../venv/bin/python -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py
EOF
echo "check_bare_install.sh: as $user (uid 4242) in $rootfs: pip install the wheels, then the demo"
chroot --userspec="$user:$user" "$rootfs" /usr/bin/env -i HOME="/home/$user" USER=$user LANG=C.UTF-8 \
  PATH=/usr/local/bin:/usr/bin:/bin /bin/bash "/home/$user/steps.sh" 2>&1 | sed 's/^/  bare| /' \
  || die "the install or the demo failed as $user (above)"

# --- the development build on the same sample ---------------------------------------------------------
dev=$(mktemp -d)
.venv/bin/python -m prepare.sample "$dev/source" > /dev/null
.venv/bin/python -m prepare --source "$dev/source" --dest "$dev/imagenet" --shard-size 2 > /dev/null 2>&1
.venv/bin/python jobs/pixels_digest.py "$dev/imagenet" > "$dev/digest.json"
rm -rf "$dev/source" "$dev/imagenet"
echo "check_bare_install.sh: wheels on a bare system: $(cat "$home/digest.json")"
echo "check_bare_install.sh: development build:      $(cat "$dev/digest.json")"
cmp -s "$home/digest.json" "$dev/digest.json" || die "the shards or their decoded crops differ from the development build's"
rm -rf "$dev"
echo "check_bare_install.sh: passed: non-root, no compiler, the demo trained, the pixels equal the development build's"
