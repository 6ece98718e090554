#!/usr/bin/env bash
# Proof that the wheels install where our users are, on every Python they claim: in a minimal root file
# system (mmdebstrap's minbase: apt, python3, python3-venv and CA certificates, nothing else; no compiler, no
# header), a user who is not root runs the README's "Install on a cluster" lines exactly as written (taken from
# the README, so the text and the check cannot drift apart; the one change: /path/to/wheels is the
# wheels' folder), in a copy of the clone. Then, in each system:
#   - PIL is pillow-simd on the pinned libjpeg-turbo (the native decoder's version);
#   - the pinned-pixel test passes;
#   - the demo trains: the built-in sample prepared, a ResNet-18 trained on it for 2 epochs (the warm-up's and
#     one after it: every path of the demo's 8, each run once: 26 CPU-seconds less a system), the metrics;
#   - the demo's shards and their decoded crops equal the development build's (.venv, from
#     jobs/install.sh) byte for byte.
# Where the machine runs arm64 binaries (qemu-user-static and binfmt_misc), the aarch64 wheel in an arm64
# Debian 12 under emulation: the pinned-pixel test, the same hashes.
#
#   bash jobs/release/build_wheels.sh && bash jobs/release/check_bare_install.sh [SYSTEM...]
#   bash jobs/release/check_bare_install.sh --roots-only [SYSTEM...]   (makes their root file systems, at once)
#
# SYSTEM: bookworm (Debian 12, Python 3.11), noble (Ubuntu 24.04, 3.12), trixie (Debian 13, 3.13),
# forky (Debian 14, 3.14), arm64; all of them by default. Each is independent of the others, so
# several may run at once. Needs root (mmdebstrap, chroot, mounts), mmdebstrap, Debian's and Ubuntu's
# mirrors and PyPI. The root file systems are kept in ~/.cache/imagenet-slurm/ between runs (made
# once: about 15 s each, 2.5 minutes under emulation); the user's home is new each run, and emptied
# at the end. This machine's pip configuration (CA bundle, constraints, local wheel folders) is carried in.
# DEVELOPMENT_DIGEST=FILE: the development build's digest kept in FILE for the runs that name it (made by the first).
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/release/bare_systems.sh
user=researcher

[[ $(id -u) == 0 ]] || die "needs root (mmdebstrap, chroot, mounts); the install inside runs as a user who is not"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt install mmdebstrap; jobs/install.sh --dev installs it)"
# arm64_runs: whether this machine runs arm64 binaries (qemu-user-static through binfmt_misc); says why not.
# (this leaves binfmt_misc mounted and qemu-user-static's aarch64 entry enabled on this machine, as
# `apt install qemu-user-static` itself would on a system that runs its init scripts)
arm64_runs() {
  command -v qemu-aarch64-static >/dev/null || {
    echo "check_bare_install.sh: aarch64 not run: qemu-user-static is missing (apt install qemu-user-static)"; return 1; }
  [[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || {
    echo "check_bare_install.sh: aarch64 not run: this machine cannot register qemu-aarch64 with binfmt_misc"; return 1; }
}

roots_only=0
[[ ${1:-} == --roots-only ]] && { roots_only=1; shift; }
systems=("$@")
(( ${#systems[@]} )) || systems=(bookworm noble trixie forky arm64)
if (( roots_only )); then  # the systems' root file systems, made where not kept, all at once
  roots=()
  for system in "${systems[@]}"; do
    case $system in
      arm64) if arm64_runs; then roots+=(bare:bookworm:arm64); fi ;;
      *) python_of_suite "$system" > /dev/null && roots+=("bare:$system:amd64") ;;
    esac
  done
  make_roots "${roots[@]}"
  exit 0
fi
[[ -x .venv/bin/python ]] || die "the development build is missing: bash jobs/install.sh"
project_wheel=$(ls dist/imagenet_slurm-*-cp311-abi3-manylinux_2_28_x86_64.whl 2>/dev/null | tail -1)
arm_wheel=$(ls dist/imagenet_slurm-*-cp311-abi3-manylinux_2_28_aarch64.whl 2>/dev/null | tail -1)
[[ -n $project_wheel ]] || die "no x86-64 wheels in dist/: bash jobs/release/build_wheels.sh"

# readme_install_lines: the shell lines of README's "Install on a cluster" block, the first ```bash block
# under that heading, with /path/to/wheels made the user's wheels folder
readme_install_lines() {
  awk '/^### Install on a cluster/ {on=1} on && /^```bash$/ {block=1; next} block && /^```$/ {exit} block' README.md |
    sed 's|/path/to/wheels|$HOME/wheels|g'
}
[[ $(readme_install_lines | grep -c 'pip install') -ge 1 ]] || die "README.md has no install lines under '### Install on a cluster'"

# --- a user in a root file system ---------------------------------------------------------------------------
# as_user ROOTFS SCRIPT TAG: run SCRIPT (a file in the user's home) as the user, each line shown after TAG
as_user() {
  local rootfs=$1 script=$2 tag=$3
  chroot "$rootfs" chown -R "$user:$user" "/home/$user"
  chroot --userspec="$user:$user" "$rootfs" /usr/bin/env -i HOME="/home/$user" USER=$user LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin /bin/bash "/home/$user/$script" 2>&1 | sed "s/^/  $tag| /"
}

# a_user_in ROOTFS: the user, with an empty home holding a clone's source tree (nothing built) and the
# pinned-pixel test with what it reads; prints the home's path
a_user_in() {
  local rootfs=$1 home=$1/home/$user
  grep -q "^$user:" "$rootfs/etc/passwd" || chroot "$rootfs" useradd --create-home --uid 4242 "$user"
  find "$home" -mindepth 1 -delete
  mkdir -p "$home/wheels" "$home/clone" "$home/check/jobs" "$home/check/tests/data" "$home/check/third_party/libjpeg-turbo"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$home/clone"
  cp jobs/release/pixels_digest.py "$home/check/jobs/"
  cp tests/test_pinned_pixels.py "$home/check/tests/"
  cp -r tests/data/pinned "$home/check/tests/data/"
  cp third_party/libjpeg-turbo/README.md "$home/check/third_party/libjpeg-turbo/"
  echo "$home"
}

# development_digest: sets dev_digest, the development build's digest of the demo's sample, made once a run. Where
# DEVELOPMENT_DIGEST names a file, made once for every run that names it (the release tier's four systems, each its
# own run, all at once: 7 CPU-seconds a system): the first writes it under a lock, the others read it.
dev_digest=
development_digest() {
  [[ -z $dev_digest ]] || return 0
  local kept=${DEVELOPMENT_DIGEST:-} lock
  if [[ -n $kept ]]; then
    exec {lock}> "$kept.lock"
    flock "$lock"
    [[ -s $kept ]] && { dev_digest=$(cat "$kept"); exec {lock}>&-; return 0; }
  fi
  local dev
  dev=$(mktemp -d)
  .venv/bin/python -m prepare.sample "$dev/source" > /dev/null
  .venv/bin/python -m prepare --source "$dev/source" --dest "$dev/imagenet" --shard-size 2 > /dev/null 2>&1
  dev_digest=$(.venv/bin/python jobs/release/pixels_digest.py "$dev/imagenet")
  rm -rf "$dev"
  if [[ -n $kept ]]; then echo "$dev_digest" > "$kept.part" && mv "$kept.part" "$kept"; exec {lock}>&-; fi
}

# --- x86-64: the README's lines, then PIL, the pinned pixels, the demo and its digest -----------------------
check_x86() {
  local suite=$1 rootfs home python started=$SECONDS
  python=$(python_of_suite "$suite")
  rootfs=$(root_system bare "$suite" amd64)
  enter "$rootfs"
  home=$(a_user_in "$rootfs")
  cp dist/imagenet_slurm-*-manylinux_2_28_x86_64.whl dist/pillow_simd-*-manylinux_2_28_x86_64.whl "$home/wheels/"
  { echo 'set -euxo pipefail'
    echo 'if command -v cc || command -v gcc; then echo "a compiler is here: not a bare system"; exit 1; fi'
    echo "python3 -c 'import sys; assert sys.version_info[:2] == (${python/./, }), sys.version'"
    echo 'cd ~/clone   # the README: "in your clone, for the batch scripts"'
    readme_install_lines
    cat <<'STEPS'
cd ~
py=clone/.venv/bin/python
$py -c "from shards.resources import pil_build; from train._jpegcrop import LIBJPEG_TURBO_VERSION as pinned
from PIL import features; text, simd = pil_build(); print('PIL:', text)
assert simd and features.version('libjpeg_turbo') == pinned, (text, pinned)"
# the wheel's native code runs what this CPU has (zig cc's __builtin_cpu_supports answered no to every feature)
$py -c "import train._jpegcrop as native
flags = next(line for line in open('/proc/cpuinfo') if line.startswith('flags')).split()
wanted = ['AVX512'] * all(f in flags for f in ('avx512f', 'avx512bw', 'avx512vl')) + ['AVX2'] * ('avx2' in flags)
print('resamplers:', native.SIMD, 'for', wanted); assert set(wanted) <= set(native.SIMD), (native.SIMD, wanted)"
$py -m prepare.sample demo/source
$py -m prepare --source demo/source --dest demo/imagenet --shard-size 2
$py -m train --data demo/imagenet --run-dir demo/run --device cpu --arch resnet18 --image-size 64 \
    --epochs 2 --batch-size 32 --lr 0.8 --warmup-epochs 1
$py -m train.report demo/run
$py check/jobs/pixels_digest.py demo/imagenet > digest.json
clone/.venv/bin/pip install -q pytest
(cd check && ../$py -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py)
# In a clone's root its unbuilt source folders shadow the wheel: one line says so, and -P runs the wheel's.
cd clone
if .venv/bin/python -c "import train.decoder" 2> shadowed.txt; then echo "the clone's sources imported"; exit 1; fi
grep "instead of the installed wheel" shadowed.txt
# and `python -m train` there says so in one line (it gave an import's 19 lines of traceback)
if .venv/bin/python -m train --help 2> door.txt; then echo "python -m train ran the clone's sources"; exit 1; fi
[[ $(wc -l < door.txt) == 1 ]] && grep "^python -m train: .*instead of the installed wheel" door.txt
.venv/bin/python -P -c "import train.decoder"
STEPS
  } > "$home/steps.sh"
  echo "check_bare_install.sh: as $user (uid 4242) in $rootfs, $(chroot "$rootfs" python3 -V): README's install lines, then the demo"
  as_user "$rootfs" steps.sh "$suite" || die "$suite: the install or the demo failed as $user (above)"
  echo "check_bare_install.sh: $suite, wheels on a bare system: $(cat "$home/digest.json")"
  development_digest
  echo "check_bare_install.sh: $suite, development build:      $dev_digest"
  [[ $(cat "$home/digest.json") == "$dev_digest" ]] ||
    die "$suite: the shards or their decoded crops differ from the development build's"
  find "$home" -mindepth 1 -delete  # (the venv: about 6 GB, torch with CUDA's libraries)
  unmount_all
  echo "check_bare_install.sh: $suite (Python $python) passed in $(( SECONDS - started )) s: README's lines as a user" \
       "who is not root, no compiler, PIL pillow-simd on the pinned libjpeg-turbo, the pinned pixels, the demo" \
       "trained, its pixels equal the development build's"
}

# --- aarch64, under emulation where the machine allows --------------------------------------------------
check_arm64() {
  local rootfs home started=$SECONDS
  [[ -n $arm_wheel ]] || { echo "check_bare_install.sh: aarch64 not run: no aarch64 wheel in dist/"; return; }
  arm64_runs || return 0
  rootfs=$(root_system bare bookworm arm64)
  enter "$rootfs"
  home=$(a_user_in "$rootfs")
  cp "$arm_wheel" "$home/wheels/"
  cat > "$home/steps.sh" <<'STEPS'
set -euxo pipefail
cd ~
[[ $(uname -m) == aarch64 ]]
# A venv without pip in it, and pip run from the wheel python3-venv itself installs it from: `python3 -m venv`
# installs pip and byte-compiles its 723 files, 26 of this check's 77 CPU-seconds under emulation; --no-compile
# likewise (each module is compiled as the test imports it). What is checked is the same: the aarch64 wheel's pixels.
python3 -m venv --without-pip venv
pip=(venv/bin/python "$(ls /usr/share/python-wheels/pip-*.whl)/pip" --disable-pip-version-check)
# the decoder and the rewrite need no torch: the wheel without its dependencies, and what the test imports
"${pip[@]}" install -q --no-compile --no-deps wheels/imagenet_slurm-*.whl
"${pip[@]}" install -q --no-compile numpy pillow pytest
venv/bin/python -m shards.pillow_simd wheels   # aarch64: says stock Pillow stays, exit 0
cd check && ../venv/bin/python -m pytest -q -p no:cacheprovider tests/test_pinned_pixels.py
STEPS
  echo "check_bare_install.sh: as $user in $rootfs (arm64, under qemu): the aarch64 wheel on the pinned JPEGs"
  as_user "$rootfs" steps.sh arm64 || die "the aarch64 wheel failed the pinned-pixel test (above)"
  find "$home" -mindepth 1 -delete
  unmount_all
  echo "check_bare_install.sh: arm64 passed in $(( SECONDS - started )) s: the pinned hashes, under emulation"
}

for system in "${systems[@]}"; do
  case $system in
    arm64) check_arm64 ;;
    *) python_of_suite "$system" > /dev/null && check_x86 "$system" ;;
  esac
done
