# Minimal root file systems of the distributions our users' clusters and build machines run, each with
# its own Python, made by mmdebstrap: sourced by jobs/release/build_wheels.sh (pillow-simd built by each
# Python, in a root that has its headers) and jobs/release/check_bare_install.sh (the README's install lines run in a bare one by a user
# who is not root). Needs root (mmdebstrap, chroot, mounts), mmdebstrap and flock.
#
# The distributions, by the Python each ships as python3 (the claims of README's "Install on a cluster"):
#
#   bookworm   Debian 12      3.11        trixie   Debian 13                3.13
#   noble      Ubuntu 24.04   3.12        forky    Debian 14 (testing now)  3.14
#
# The roots are made once and kept in $cache (about 15 s each; under emulation, arm64's 2.5 minutes).

cache=${XDG_CACHE_HOME:-$HOME/.cache}/imagenet-slurm
debian_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ubuntu_mirror=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

python_of_suite() {  # SUITE: the CPython version its python3 is
  case $1 in
    bookworm) echo 3.11 ;; noble) echo 3.12 ;; trixie) echo 3.13 ;; forky) echo 3.14 ;;
    *) die "no Python known for suite $1 (bookworm, noble, trixie, forky)" ;;
  esac
}

suite_of_python() {  # VERSION: the suite whose python3 it is
  local suite
  for suite in bookworm noble trixie forky; do
    [[ $(python_of_suite "$suite") == "$1" ]] && { echo "$suite"; return; }
  done
  die "no distribution known here ships CPython $1 as its python3 (3.11 to 3.14)"
}

# ubuntu_keyring: Ubuntu's archive key, to check noble's packages. Debian 12's debootstrap has neither
# the key nor noble's script; Debian 13 packages the key (ubuntu-keyring), which is fetched
# through Debian's signed Release (checked with this machine's Debian keys) and the sha256 it lists.
ubuntu_keyring() {
  local dir=$cache/ubuntu-keyring key release packages entry file sha lock
  key=$dir/usr/share/keyrings/ubuntu-archive-keyring.gpg
  mkdir -p "$cache"
  exec {lock}> "$dir.lock"  # (two noble roots made at once: one fetches, the other waits; closed on return)
  flock "$lock"
  [[ -f $key ]] && { echo "$key"; return; }
  rm -rf "$dir" && mkdir -p "$dir"
  curl -fsS -m 120 -o "$dir/InRelease" "$debian_mirror/dists/trixie/InRelease" || die "cannot fetch trixie's InRelease"
  gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$dir/Release" "$dir/InRelease" 2>/dev/null ||
    die "trixie's Release is not signed by a key of /usr/share/keyrings/debian-archive-keyring.gpg"
  release_sha() { awk -v f="$1" '/^SHA256:/ {on=1; next} /^[A-Z]/ {on=0} on && $3 == f {print $1}' "$dir/Release"; }
  # (binary-amd64's list, as debootstrap reads it: it lists the packages for every architecture too)
  packages=main/binary-amd64/Packages.xz
  curl -fsS -m 300 -o "$dir/Packages.xz" "$debian_mirror/dists/trixie/$packages" || die "cannot fetch trixie's $packages"
  echo "$(release_sha "$packages")  $dir/Packages.xz" | sha256sum -c --quiet - || die "trixie's $packages: wrong sha256"
  entry=$(xz -dc "$dir/Packages.xz" | awk '/^Package: ubuntu-keyring$/ {on=1} on && /^$/ {exit} on')
  file=$(sed -n 's/^Filename: //p' <<< "$entry")
  sha=$(sed -n 's/^SHA256: //p' <<< "$entry")
  [[ -n $file && -n $sha ]] || die "trixie lists no ubuntu-keyring"
  curl -fsS -m 120 -o "$dir/keyring.deb" "$debian_mirror/$file" || die "cannot fetch $file"
  echo "$sha  $dir/keyring.deb" | sha256sum -c --quiet - || die "$file: wrong sha256"
  dpkg-deb -x "$dir/keyring.deb" "$dir"
  [[ -f $key ]] || die "$file holds no ubuntu-archive-keyring.gpg"
  echo "$key"
}

# mmdebstrap_suite SUITE ARCH ROOTFS PACKAGES: SUITE's minimal system (minbase: its Essential and required
# packages) with PACKAGES (comma-separated; apt among them, as debootstrap's minbase has it: mmdebstrap's leaves
# it out where it is not required, as in Ubuntu, and with it the C++ runtime every real system has). mmdebstrap, not debootstrap: it installs through apt and dpkg without
# a sync a file (15 s a root here where debootstrap took 56 s), and needs no script for a new suite.
# Its apt settings, for the making only (taken out of the root at the end): apt reads the Ubuntu key as root
# (its sandbox user cannot enter root's ~/.cache); a mirror's Release past its Valid-Until is accepted (a
# testing suite's lasts a week, and debootstrap never checked it): each Release is still checked
# against its signature, each package against the Release's sha256.
mmdebstrap_suite() {
  local suite=$1 arch=$2 rootfs=$3 packages=$4 where=()
  case $suite in
    noble) where=(--keyring="$(ubuntu_keyring)" --components=main,universe "$suite" "$rootfs" "$ubuntu_mirror") ;;
    *) where=("$suite" "$rootfs" "$debian_mirror") ;;
  esac
  mmdebstrap --variant=minbase --arch="$arch" --include="$packages" \
    --aptopt='APT::Sandbox::User "root"' --aptopt='Acquire::Check-Valid-Until "false"' \
    --customize-hook='rm -f "$1/etc/apt/apt.conf.d/99mmdebstrap"' "${where[@]}" > "$rootfs.log" 2>&1 ||
    die "mmdebstrap $suite $arch failed: $rootfs.log"
}

# root_system KIND SUITE ARCH: a kept root file system, made once; prints its path. KIND bare: apt, python3,
# python3-venv and CA certificates, nothing else (checked: no compiler, no header). KIND build: the
# suite's Python with its headers and venv, for building a wheel with a compiler from outside.
# Several processes may ask for one root at once (make_roots, the checks): the first makes it under a lock
# the others wait on.
root_system() {
  local kind=$1 suite=$2 arch=$3 rootfs packages python absent lock
  python=python$(python_of_suite "$suite")
  rootfs=$cache/$kind-$suite-$arch
  case $kind in
    bare) packages=apt,python3,python3-venv,ca-certificates ;;
    build) packages=apt,$python,$python-dev,$python-venv,ca-certificates ;;
  esac
  mkdir -p "$cache"
  exec {lock}> "$rootfs.lock"
  flock "$lock"
  # (.complete holds the packages it was made with: a root made otherwise, or by debootstrap before, is made again)
  if [[ $(cat "$rootfs/.complete" 2>/dev/null) != "$packages" ]]; then
    # (a mount left by a killed run would make rm -rf reach into what it shows: refuse instead)
    ! grep -q " $rootfs/" /proc/mounts || die "mounts are left under $rootfs (a killed run?): umount them first"
    echo "$(basename "$0"): mmdebstrap $suite $arch (minbase + ${packages//,/, }) into $rootfs" >&2
    rm -rf "$rootfs" && mkdir -p "$rootfs"
    mmdebstrap_suite "$suite" "$arch" "$rootfs" "$packages"
    echo "$packages" > "$rootfs/.complete"
  fi
  exec {lock}>&-
  if [[ $kind == bare ]]; then
    for absent in usr/bin/cc usr/bin/gcc usr/bin/nasm usr/include/jpeglib.h usr/include/zlib.h; do
      [[ ! -e $rootfs/$absent ]] || die "$rootfs is not bare: it has /$absent"
    done
    ! compgen -G "$rootfs/usr/include/python3*/Python.h" > /dev/null || die "$rootfs is not bare: it has Python's headers"
  fi
  echo "$rootfs"
}

# make_roots KIND:SUITE:ARCH...: root_system for each, all at once (each waits on the network and on one CPU
# by turns); fails naming those that failed, each with its log
make_roots() {
  local spec pids=() failed=() i
  for spec in "$@"; do
    (root_system ${spec//:/ } > /dev/null) &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[i]}" || failed+=("${@:i+1:1}"); done
  (( ${#failed[@]} == 0 )) || die "could not make the root file systems ${failed[*]} (above)"
}

# --- mounts, undone on exit -------------------------------------------------------------------------------
mounts=()
unmount_all() {
  local i
  for (( i=${#mounts[@]}-1; i>=0; i-- )); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
  mounts=()
}
trap unmount_all EXIT
trap 'exit 1' INT TERM   # (the EXIT trap then unmounts)
mount_at() {  # mount_at TARGET MOUNT-ARGS...: a mount undone on exit
  local target=$1
  shift
  mount "$@" "$target" && mounts+=("$target")
}
bind_read_only() {  # bind_read_only PATH: this machine's PATH, at the same place in ROOTFS ($2)
  local path=$1 rootfs=$2
  if [[ -d $path ]]; then mkdir -p "$rootfs$path"; else mkdir -p "$(dirname "$rootfs$path")"; touch "$rootfs$path"; fi
  mount_at "$rootfs$path" --bind "$path"
  mount -o remount,bind,ro "$rootfs$path"
}

# enter ROOTFS: /proc, a /dev/shm (the loader's workers share batches there), DNS, and this machine's pip
# configuration with every file and folder it names mounted read-only at the same place
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
    [[ -e $path ]] && bind_read_only "$path" "$rootfs"
  done
}
