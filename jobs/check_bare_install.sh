#!/usr/bin/env bash
# Proof that the wheels install where our users are: a minimal Debian root file system (debootstrap:
# python3 and python3-venv, nothing else; no compiler, no header), and in it a user who is not root
# installs the wheels with pip, as docs/install.md says, and runs the demo: the built-in sample
# prepared, a ResNet-18 trained on it, the metrics. Then the pixels: the pinned-pixel test passes
# there, and the demo's shards and their decoded crops equal the development build's (.venv, from
# jobs/install.sh) byte for byte. The same wheel on Debian 13's Python 3.13 (the stable ABI), and,
# where the machine runs arm64 binaries (qemu-user-static and binfmt_misc), the aarch64 wheel in an
# arm64 root file system under emulation: the pinned-pixel test, the same hashes.
#
#   bash jobs/build_wheels.sh && bash jobs/check_bare_install.sh
#
# Needs root (debootstrap, chroot, mounts), debootstrap, Debian's mirror and PyPI. The root file systems
# are kept in ~/.cache/imagenet-slurm/ between runs (made once: about a minute, several under emulation);
# the user's home is new each run. This machine's pip configuration (CA bundle, constraints, local wheel
# folders) is carried in.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${XDG_CACHE_HOME:-$HOME/.cache}/imagenet-slurm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
user=researcher
die() { echo "check_bare_install.sh: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (debootstrap, chroot, mounts); the install inside runs as a user who is not"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt install debootstrap; jobs/install.sh --dev installs it)"
[[ -x .venv/bin/python ]] || die "the development build is missing: bash jobs/install.sh"
project_wheel=$(ls dist/imagenet_slurm-*-cp311-abi3-manylinux_2_28_x86_64.whl 2>/dev/null | tail -1)
simd_wheel=$(ls dist/pillow_simd-*-cp311-cp311-manylinux_2_28_x86_64.whl 2>/dev/null | tail -1)
arm_wheel=$(ls dist/imagenet_slurm-*-cp311-abi3-manylinux_2_28_aarch64.whl 2>/dev/null | tail -1)
[[ -n $project_wheel && -n $simd_wheel ]] || die "no x86-64 wheels in dist/: bash jobs/build_wheels.sh"

# --- bare systems, and a user in them -----------------------------------------------------------------
# bare_system ARCH [SUITE]: a minimal Debian (bookworm unless named) for ARCH (amd64, arm64) in $cache,
# made once; prints its path
bare_system() {
  local arch=$1 suite=${2:-bookworm} rootfs=$cache/bare-${2:-bookworm}-$1 absent
  # (a mount left by a killed run would make rm -rf reach into what it shows: refuse instead)
  ! grep -q " $rootfs/" /proc/mounts || die "mounts are left under $rootfs (a killed run?): umount them first"
  if [[ ! -f $rootfs/.complete ]]; then
    echo "check_bare_install.sh: debootstrap $suite $arch (minbase + python3, python3-venv) into $rootfs" >&2
    rm -rf "$rootfs" && mkdir -p "$rootfs"
    debootstrap --arch="$arch" --variant=minbase --include=python3,python3-venv,ca-certificates "$suite" \
      "$rootfs" "$mirror" > "$rootfs.log" 2>&1 || die "debootstrap failed: $rootfs.log"
    touch "$rootfs/.complete"
  fi
  for absent in usr/bin/cc usr/bin/gcc usr/bin/nasm usr/include/jpeglib.h usr/include/zlib.h; do
    [[ ! -e $rootfs/$absent ]] || die "$rootfs is not bare: it has /$absent"
  done
  ! compgen -G "$rootfs/usr/include/python3*/Python.h" > /dev/null || die "$rootfs is not bare: it has Python's headers"
  echo "$rootfs"
}

mounts=()
cleanup() {
  local i
  for (( i=${#mounts[@]}-1; i>=0; i-- )); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM   # (the EXIT trap then unmounts)
mount_at() {  # mount_at TARGET MOUNT-ARGS...: a mount undone on exit
  local target=$1
  shift
  mount "$@" "$target" && mounts+=("$target")
}

# enter ROOTFS: /proc, a /dev/shm (the loader's workers share batches there), DNS, this machine's pip
# configuration with every file and folder it names mounted read-only at the same place, and the user
# with an empty home
enter() {
  local rootfs=$1 key value path
  mount_at "$rootfs/proc" -t proc proc
  mount_at "$rootfs/dev/shm" -t tmpfs -o size=4g shm
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  echo "[global]" > "$rootfs/etc/pip.conf"
  # (pip lists the environment's settings first, and they win: the first of each key is kept)
  pip config list 2>/dev/null | sed -E "s/^(global|:env:)\.([a-z-]+)='(.*)'$/\2 \3/" | awk '!seen[$1]++' |
    while read -r key value; do
      [[ $key == disable-pip-version-check || $key == default-timeout ]] || echo "$key = $value" >> "$rootfs/etc/pip.conf"
    done
  # (a local index's pages link to ../../files: its parent folder is mounted)
  for path in $(sed -n 's/^[a-z-]* = //p' "$rootfs/etc/pip.conf" | tr ' ' '\n' | sed -E 's|^file://||; s|/simple/?$||' | sort -u); do
    [[ -e $path ]] || continue
    if [[ -d $path ]]; then mkdir -p "$rootfs$path"; else mkdir -p "$(dirname "$rootfs$path")"; touch "$rootfs$path"; fi
    mount_at "$rootfs$path" --bind "$path"
    mount -o remount,bind,ro "$rootfs$path"
  done
  grep -q "^$user:" "$rootfs/etc/passwd" || chroot "$rootfs" useradd --create-home --uid 4242 "$user"
  find "$rootfs/home/$user" -mindepth 1 -delete
}

# as_user ROOTFS SCRIPT TAG: run SCRIPT (a file in the user's home) as the user, each line shown after TAG
as_user() {
  local rootfs=$1 script=$2 tag=$3
  chroot "$rootfs" chown -R "$user:$user" "/home/$user"
  chroot --userspec="$user:$user" "$rootfs" /usr/bin/env -i HOME="/home/$user" USER=$user LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin /bin/bash "/home/$user/$script" 2>&1 | sed "s/^/  $tag| /"
}

# copy_checks HOME: the pinned-pixel test and what it reads, into HOME/check
copy_checks() {
  local home=$1
  mkdir -p "$home/check/jobs" "$home/check/tests/data" "$home/check/third_party/libjpeg-turbo"
  cp jobs/pixels_digest.py "$home/check/jobs/"
  cp tests/test_pinned_pixels.py "$home/check/tests/"
  cp -r tests/data/pinned "$home/check/tests/data/"
  cp third_party/libjpeg-turbo/README.md "$home/check/third_party/libjpeg-turbo/"
}

# --- x86-64: docs/install.md's commands, then the demo --------------------------------------------------
rootfs=$(bare_system amd64)
enter "$rootfs"
home=$rootfs/home/$user
mkdir -p "$home/wheels" "$home/clone"
cp "$project_wheel" "$simd_wheel" "$home/wheels/"
copy_checks "$home"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$home/clone"   # a clone's source tree, nothing built
cat > "$home/steps.sh" <<'STEPS'
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
(cd check && ../venv/bin/python -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py)
# In a clone's root its unbuilt source folders shadow the wheel: one line says so, and -P runs the wheel's.
cd clone
if ../venv/bin/python -c "import train.decoder" 2> shadowed.txt; then echo "the clone's sources imported"; exit 1; fi
grep "instead of the installed wheel" shadowed.txt
../venv/bin/python -P -c "import train.decoder"
STEPS
echo "check_bare_install.sh: as $user (uid 4242) in $rootfs: pip install the wheels, then the demo"
as_user "$rootfs" steps.sh amd64 || die "the install or the demo failed as $user (above)"

# --- the development build on the same sample -----------------------------------------------------------
dev=$(mktemp -d)
.venv/bin/python -m prepare.sample "$dev/source" > /dev/null
.venv/bin/python -m prepare --source "$dev/source" --dest "$dev/imagenet" --shard-size 2 > /dev/null 2>&1
.venv/bin/python jobs/pixels_digest.py "$dev/imagenet" > "$dev/digest.json"
echo "check_bare_install.sh: wheels on a bare system: $(cat "$home/digest.json")"
echo "check_bare_install.sh: development build:      $(cat "$dev/digest.json")"
cmp -s "$home/digest.json" "$dev/digest.json" || die "the shards or their decoded crops differ from the development build's"
rm -rf "$dev"
echo "check_bare_install.sh: x86-64 passed: non-root, no compiler, the demo trained, the pixels equal the development build's"

# --- the same wheel on a newer Python: Debian 13's 3.13 (the stable ABI: one wheel for 3.11 and later) ----
rootfs=$(bare_system amd64 trixie)
enter "$rootfs"
home=$rootfs/home/$user
mkdir -p "$home/wheels"
cp "$project_wheel" "$home/wheels/"
copy_checks "$home"
cat > "$home/steps.sh" <<'STEPS'
set -euxo pipefail
cd ~
python3 -c 'import sys; assert sys.version_info >= (3, 12), sys.version'
python3 -m venv venv
# the decoder and the rewrite need no torch: the wheel without its dependencies, and what the test imports
venv/bin/pip install -q --no-deps wheels/imagenet_slurm-*.whl
venv/bin/pip install -q numpy pillow pytest
cd check && ../venv/bin/python -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py
STEPS
echo "check_bare_install.sh: as $user in $rootfs: the same x86-64 wheel on $(chroot "$rootfs" python3 -V)"
as_user "$rootfs" steps.sh trixie || die "the x86-64 wheel failed the pinned-pixel test on trixie's Python (above)"
echo "check_bare_install.sh: $(chroot "$rootfs" python3 -V) passed: the same wheel, the pinned hashes"

# --- aarch64, under emulation where the machine allows --------------------------------------------------
[[ -n $arm_wheel ]] || { echo "check_bare_install.sh: aarch64 not run: no aarch64 wheel in dist/"; exit 0; }
command -v qemu-aarch64-static >/dev/null || {
  echo "check_bare_install.sh: aarch64 not run: qemu-user-static is missing (apt install qemu-user-static)"; exit 0; }
# (this leaves binfmt_misc mounted and qemu-user-static's aarch64 entry enabled on this machine, as
# `apt install qemu-user-static` itself would on a system that runs its init scripts)
[[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || {
  echo "check_bare_install.sh: aarch64 not run: this machine cannot register qemu-aarch64 with binfmt_misc"; exit 0; }
rootfs=$(bare_system arm64)
enter "$rootfs"
home=$rootfs/home/$user
mkdir -p "$home/wheels"
cp "$arm_wheel" "$home/wheels/"
copy_checks "$home"
cat > "$home/steps.sh" <<'STEPS'
set -euxo pipefail
cd ~
[[ $(uname -m) == aarch64 ]]
python3 -m venv venv
# the decoder and the rewrite need no torch: the wheel without its dependencies, and what the test imports
venv/bin/pip install -q --no-deps wheels/imagenet_slurm-*.whl
venv/bin/pip install -q numpy pillow pytest
cd check && ../venv/bin/python -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py
STEPS
echo "check_bare_install.sh: as $user in $rootfs (arm64, under qemu): the aarch64 wheel on the pinned JPEGs"
as_user "$rootfs" steps.sh arm64 || die "the aarch64 wheel failed the pinned-pixel test (above)"
echo "check_bare_install.sh: aarch64 passed: the pinned hashes, under emulation"
