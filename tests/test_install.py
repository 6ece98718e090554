"""The install paths (docs/install.md): the wheels on a bare system as a user who is not root, the
build from source and what it tells a user it cannot serve, and the vendored libjpeg-turbo's build."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "third_party"))
import libjpeg_turbo  # noqa: E402  (third_party/libjpeg_turbo.py)

IS_ROOT = os.geteuid() == 0


def run_script(*command: str, env: dict | None = None, cwd: Path = ROOT, user: str | None = None,
               timeout: int = 120) -> subprocess.CompletedProcess:
    if user:  # as a user who is not root: setpriv drops root's ids and groups
        command = ("setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command)  # uid, gid
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def path_without(folder: Path, *missing: str) -> str:
    """A PATH of one folder that holds every command of /usr/bin and /bin but `missing`: what a machine
    without them has."""
    folder.mkdir()
    for bin_dir in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for command in Path(bin_dir).iterdir():
            target = folder / command.name
            if command.name not in missing and not target.exists():
                target.symlink_to(command)
    return str(folder)


@pytest.fixture
def open_tmp():
    """A temporary folder any user may enter (pytest's tmp_path lies under a folder only root may)."""
    folder = Path(tempfile.mkdtemp(prefix="install-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def copy_of_jobs(folder: Path) -> Path:
    """install.sh and what it sources, as a clone holds them."""
    clone = folder / "clone"
    (clone / "jobs").mkdir(parents=True)
    for name in ("install.sh", "pillow_simd.sh"):
        shutil.copy(ROOT / "jobs" / name, clone / "jobs" / name)
    for path in [clone, *clone.rglob("*")]:
        path.chmod(0o755)
    return clone


# ----------------------------------------------------------------------- the wheels, on a bare system

@pytest.mark.slow
@pytest.mark.skipif(not IS_ROOT or shutil.which("debootstrap") is None or shutil.which("nasm") is None,
                    reason="needs root, debootstrap and NASM (bash jobs/install.sh --dev, as root)")
def test_the_wheels_build_and_run_the_demo_on_a_bare_system_as_a_user_who_is_not_root():
    built = run_script("bash", "jobs/build_wheels.sh", timeout=1500)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    shown = re.findall(r"build_wheels.sh: (\S+\.whl): (.*)", built.stdout)
    names = sorted(name for name, _ in shown)
    assert [re.sub(r"-\d[^-]*-", "-V-", name, count=1) for name in names] == [
        "imagenet_slurm-V-cp311-abi3-manylinux_2_28_aarch64.whl",
        "imagenet_slurm-V-cp311-abi3-manylinux_2_28_x86_64.whl",
        "pillow_simd-V-cp311-cp311-manylinux_2_28_x86_64.whl"], names
    for name, report in shown:  # nothing outside the wheel but glibc, no glibc symbol newer than 2.28
        assert "requires no external shared libraries" in report or "external shared libraries" not in report, report
        libraries = set(re.findall(r"(lib[\w+-]+\.so\.\d+) with versions", report))
        assert libraries <= {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0"}, (name, libraries)
        versions = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", report)]
        assert versions and max(versions) <= (2, 28), (name, versions)

    checked = run_script("bash", "jobs/check_bare_install.sh", timeout=2400)
    log = checked.stdout + checked.stderr
    assert checked.returncode == 0, log[-6000:]
    assert "x86-64 passed" in log
    assert "amd64| 7 passed" in log  # the pinned-pixel test, pillow-simd's two included
    assert re.search(r"val top-1 \d+\.\d+%", log)
    assert re.search(r"Python 3\.1[2-9]\.\d+ passed", log)  # the same abi3 wheel on Debian 13's Python
    if shutil.which("qemu-aarch64-static"):
        assert "aarch64 passed" in log or "cannot register qemu-aarch64" in log, log[-3000:]


# ----------------------------------------------------------------------- from source: jobs/install.sh

@pytest.mark.skipif(not IS_ROOT or platform.machine() != "x86_64", reason="needs root (to become nobody), x86-64")
@pytest.mark.parametrize("user", ["65534", None], ids=["not-root", "root-without-apt"])
def test_install_sh_sends_a_user_without_nasm_to_the_wheels(open_tmp, user):
    clone = copy_of_jobs(open_tmp)
    env = {"PATH": path_without(open_tmp / "bin", "nasm", "yasm", "apt-get"), "HOME": str(open_tmp)}
    done = run_script("bash", "jobs/install.sh", env=env, cwd=clone, user=user)
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert re.search(r"needs [\w -]*\bnasm\b", message) and "Install on a cluster" in message, message
    assert not (clone / ".venv").exists()  # refused before anything was made


def test_install_sh_asks_for_python_3_11_and_says_how_to_get_one(tmp_path):
    clone = copy_of_jobs(tmp_path)
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.12'\nexit 1\n")
    old.chmod(0o755)
    done = run_script("bash", "jobs/install.sh", env={**os.environ, "PYTHON": str(old)}, cwd=clone)
    assert done.returncode == 1
    assert "Python 3.10.12" in done.stderr and "3.11 or newer" in done.stderr and "uv python install 3.11" in done.stderr


def test_submit_sh_without_a_compiler_says_to_sbatch_directly(tmp_path):
    """submit.sh builds the commit's native modules for its snapshot; where nothing can compile (a cluster
    user with the wheels), it says what is missing and that the wheels need no snapshot."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    shutil.copy(ROOT / "jobs" / "submit.sh", clone / "jobs" / "submit.sh")  # this tree's, committed there
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-q", "-a",
                    "-m", "this tree's submit.sh", "--allow-empty"], cwd=clone, check=True)
    compilers = ("cc", "gcc", "x86_64-linux-gnu-gcc", "c99", "c89", "clang", "nasm", "yasm", "cmake")
    env = {"PATH": path_without(tmp_path / "bin", *compilers), "HOME": str(tmp_path), "PYTHON": sys.executable,
           "CODE_DIR": str(tmp_path / "code")}
    done = run_script("bash", "jobs/submit.sh", "jobs/imagenet.sbatch", cwd=clone, env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stderr and "sbatch the job script directly" in done.stderr
    assert not [p for p in (tmp_path / "code").iterdir() if not p.name.endswith(".partial")]  # no snapshot made


# ----------------------------------------------------------------------- the vendored libjpeg-turbo's build

def test_simd_is_required_where_the_vendored_source_has_it_and_off_elsewhere():
    assert "-DREQUIRE_SIMD=ON" in libjpeg_turbo.configure_options("x86_64")
    assert "-DREQUIRE_SIMD=ON" in libjpeg_turbo.configure_options("aarch64")
    assert "-DWITH_SIMD=OFF" in libjpeg_turbo.configure_options("ppc64le")  # upstream/simd keeps no PowerPC code
    for folder in ("x86_64", "nasm", "arm/aarch64"):
        assert (libjpeg_turbo.SOURCE / "simd" / folder).is_dir()


def test_a_cross_build_targets_the_toolchain_files_cpu(tmp_path, monkeypatch):
    toolchain = tmp_path / "aarch64.cmake"
    toolchain.write_text("set(CMAKE_SYSTEM_NAME Linux)\nset(CMAKE_SYSTEM_PROCESSOR aarch64)\n")
    monkeypatch.setenv("CMAKE_TOOLCHAIN_FILE", str(toolchain))
    assert libjpeg_turbo.target_machine() == "aarch64"
    cross = libjpeg_turbo.build_key("aarch64")
    monkeypatch.delenv("CMAKE_TOOLCHAIN_FILE")
    assert libjpeg_turbo.target_machine() == platform.machine().lower()
    assert libjpeg_turbo.build_key("aarch64") != cross  # a build for another toolchain is never reused


@pytest.mark.skipif(platform.machine() != "x86_64", reason="NASM is needed on x86-64 only")
def test_a_build_without_nasm_is_refused_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nasm, no cmake
    with pytest.raises(libjpeg_turbo.BuildError, match="NASM.*prebuilt wheels.*apt install nasm"):
        libjpeg_turbo.build(tmp_path / "prefix")
    assert not (tmp_path / "prefix").exists()


def test_the_development_build_is_reused_while_its_source_and_options_are_the_same(monkeypatch, tmp_path):
    """install.sh's second step asks for the prefix setup.py built: no CMake or NASM needed to get it."""
    prefix = ROOT / "build" / "libjpeg-turbo" / libjpeg_turbo.target_machine()
    if not (prefix / "built-from").exists():
        pytest.skip("no development build here (bash jobs/install.sh)")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    assert libjpeg_turbo.build(prefix) == prefix.resolve()
    assert sorted(p.name for p in (prefix / "include").iterdir()) == ["jconfig.h", "jerror.h", "jmorecfg.h", "jpeglib.h"]


# ----------------------------------------------------------------------- what the stages say of PIL

def test_the_stages_say_stock_pillow_is_expected_on_aarch64_and_how_to_fix_it_on_x86_64():
    from shards.resources import pil_build_note

    assert pil_build_note("pillow-simd 12.1.1.post0 (libjpeg-turbo 3.1.2)", True, "x86_64") == (
        False, "PIL: pillow-simd 12.1.1.post0 (libjpeg-turbo 3.1.2)")
    warning, line = pil_build_note("Pillow 12.0.0 (libjpeg-turbo 3.1.2)", False, "aarch64")
    assert not warning and "as expected on aarch64 (pillow-simd's SIMD is x86 only)" in line
    warning, line = pil_build_note("Pillow 12.0.0 (libjpeg-turbo 3.1.2)", False, "x86_64")
    assert warning and "jobs/install.sh" in line and "pip install --no-deps pillow-simd" in line


def test_our_patches_apply_exactly_to_the_vendored_release_or_not_at_all(tmp_path):
    [patch] = libjpeg_turbo.patches()
    (tmp_path / "src").mkdir()
    release = (libjpeg_turbo.SOURCE / "src" / "jdhuff.c").read_text()
    (tmp_path / "src" / "jdhuff.c").write_text(release)
    assert libjpeg_turbo.apply_patch(patch.read_text(), tmp_path) == ["src/jdhuff.c"]
    patched = (tmp_path / "src" / "jdhuff.c").read_text()
    assert patched != release and "imagenet-slurm" in patched
    with pytest.raises(libjpeg_turbo.PatchError, match=r"src/jdhuff.c: line \d+ is not what the patch expects"):
        libjpeg_turbo.apply_patch(patch.read_text(), tmp_path)  # made for another text: refused, nothing written
    assert (tmp_path / "src" / "jdhuff.c").read_text() == patched
    assert "applies to: libjpeg-turbo 3.1.2" in patch.read_text().lower()  # the version it was made for


def test_the_reference_build_is_the_release_as_it_is(tmp_path):
    tree = libjpeg_turbo.patched_source(tmp_path, patched=False)
    assert (tree / "src" / "jdhuff.c").read_bytes() == (libjpeg_turbo.SOURCE / "src" / "jdhuff.c").read_bytes()
    assert libjpeg_turbo.build_key("x86_64", patched=False) != libjpeg_turbo.build_key("x86_64")
