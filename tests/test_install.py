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
import zipfile
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


# ----------------------------------------------------------------------- the wheels, on bare systems
# Release checks (pytest -m release): the wheels built once, then the README's install lines run as written in a
# bare system for each Python the wheels claim, each system its own test so that two workers share them out.

BARE_SYSTEMS = {"bookworm": "3.11", "noble": "3.12", "trixie": "3.13", "forky": "3.14"}
needs_root_and_mmdebstrap = pytest.mark.skipif(
    not IS_ROOT or shutil.which("mmdebstrap") is None or shutil.which("nasm") is None,
    reason="needs root, mmdebstrap and NASM (bash jobs/install.sh --dev, as root)")


@pytest.fixture(scope="session")
def built_wheels(tmp_path_factory) -> str:
    """jobs/release/build_wheels.sh's output, built once a run whichever worker asks first (the others wait on the lock)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every xdist worker of this run
    with FileLock(str(shared / "wheels.lock")):
        done = shared / "wheels.log"
        if not done.exists():
            # the bare systems' root file systems, where not kept from an earlier run, made meanwhile (the wheels'
            # own, for the other Pythons, build_wheels.sh makes meanwhile too)
            roots = subprocess.Popen(["bash", "jobs/release/check_bare_install.sh", "--roots-only"], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            built = run_script("bash", "jobs/release/build_wheels.sh", timeout=1500)
            made = roots.communicate(timeout=1500)[0]
            assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
            assert roots.returncode == 0, made[-3000:]
            done.write_text(built.stdout)
        return done.read_text()


@pytest.mark.release
@needs_root_and_mmdebstrap
def test_the_wheels_are_manylinux_2_28_one_pillow_simd_a_python_and_none_carries_ubsan(built_wheels):
    shown = re.findall(r"build_wheels.sh: (\S+\.whl): (.*)", built_wheels)
    names = sorted(name for name, _ in shown)
    assert [re.sub(r"-\d[^-]*-", "-V-", name, count=1) for name in names] == [
        "imagenet_slurm-V-cp311-abi3-manylinux_2_28_aarch64.whl",
        "imagenet_slurm-V-cp311-abi3-manylinux_2_28_x86_64.whl",
        *(f"pillow_simd-V-cp3{minor}-cp3{minor}-manylinux_2_28_x86_64.whl" for minor in (11, 12, 13, 14))], names
    for name, report in shown:  # nothing outside the wheel but glibc, no glibc symbol newer than 2.28
        assert "requires no external shared libraries" in report or "external shared libraries" not in report, report
        libraries = set(re.findall(r"(lib[\w+-]+\.so\.\d+) with versions", report))
        assert libraries <= {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0"}, (name, libraries)
        versions = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", report)]
        assert versions and max(versions) <= (2, 28), (name, versions)
    for wheel in (ROOT / "dist").glob("*manylinux_2_28*.whl"):  # build_wheels.sh refuses these; checked again here
        with zipfile.ZipFile(wheel) as archive:
            assert not [n for n in archive.namelist() if ".so" in n and b"ubsan_rt" in archive.read(n)], wheel.name


@pytest.mark.release
@needs_root_and_mmdebstrap
@pytest.mark.parametrize("suite", BARE_SYSTEMS)
def test_the_readme_install_lines_as_written_run_the_demo_on_a_bare_system_as_a_user_who_is_not_root(
        built_wheels, suite, tmp_path_factory):
    # the development build's digest, which each system's pixels must equal, made by the first system of the run
    kept = tmp_path_factory.getbasetemp().parent / "development-digest.json"  # every xdist worker's
    checked = run_script("bash", "jobs/release/check_bare_install.sh", suite, timeout=1500,
                         env={**os.environ, "DEVELOPMENT_DIGEST": str(kept)})
    log = checked.stdout + checked.stderr
    assert checked.returncode == 0, log[-6000:]
    python = BARE_SYSTEMS[suite]
    assert f"Python {python}." in log  # that suite's own python3
    assert f"| + .venv/bin/python -m shards.pillow_simd /home/researcher/wheels" in log  # the README's line, run
    assert re.search(rf"{suite}\| pillow_simd: Pillow \S+ \(libjpeg-turbo [\d.]+\) -> pillow_simd-[^ ]*-cp{python.replace('.', '')}-", log)
    assert f"{suite}| PIL: pillow-simd 12." in log
    assert f"{suite}| 7 passed" in log  # the pinned-pixel test, pillow-simd's two included
    assert re.search(r"val top-1 \d+\.\d+%", log)
    assert f"check_bare_install.sh: {suite} (Python {python}) passed" in log


@pytest.mark.release
@needs_root_and_mmdebstrap
def test_the_aarch64_wheel_gives_the_pinned_pixels_under_emulation(built_wheels):
    if shutil.which("qemu-aarch64-static") is None:
        pytest.skip("qemu-user-static is missing (bash jobs/install.sh --dev)")
    checked = run_script("bash", "jobs/release/check_bare_install.sh", "arm64", timeout=1500)
    log = checked.stdout + checked.stderr
    assert checked.returncode == 0, log[-6000:]
    if "cannot register qemu-aarch64" in log:
        pytest.skip("this machine cannot register qemu-aarch64 with binfmt_misc")
    assert "arm64| pillow_simd: pillow-simd's SIMD is x86 only: on aarch64 PIL stays Pillow" in log
    assert "arm64| 5 passed, 2 skipped" in log and "check_bare_install.sh: arm64 passed" in log


# ----------------------------------------------------------------------- from source: jobs/install.sh

@pytest.mark.slow
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


@pytest.mark.slow  # two processes that import torch
def test_each_door_where_the_native_modules_are_not_built_stops_in_one_line(sources, tmp_path):
    """A clone's source tree without its built modules, imported from the working directory (in place of the
    installed wheel, or before jobs/install.sh): one line naming what to do, where each door gave 14-19 lines of
    an import's traceback."""
    clone = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():  # the working tree's sources, as a clone holds them: no built module
        if (ROOT / name).is_file() and name.endswith(".py"):
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, clone / name)
    doors = {"prepare": ["--source", str(sources["official"]), "--dest", str(tmp_path / "out")], "train": ["--help"]}
    # -S: no .pth file runs, so this checkout's editable install cannot route the imports back here
    path = os.pathsep.join([str(clone), *(p for p in sys.path if p.endswith("site-packages"))])
    for door, args in doors.items():
        result = subprocess.run([sys.executable, "-S", "-m", door, *args], cwd=clone, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": path})
        assert result.returncode == 2 and result.stdout == "", (door, result)
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(f"python -m {door}: the native "), \
            (door, result.stderr)
        assert "is not built" in result.stderr


def test_install_sh_asks_for_python_3_11_and_says_how_to_get_one(tmp_path):
    clone = copy_of_jobs(tmp_path)
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.12'\nexit 1\n")
    old.chmod(0o755)
    done = run_script("bash", "jobs/install.sh", env={**os.environ, "PYTHON": str(old)}, cwd=clone)
    assert done.returncode == 1
    assert "Python 3.10.12" in done.stderr and "3.11 or newer" in done.stderr and "uv python install 3.11" in done.stderr


@pytest.mark.slow
def test_submit_sh_without_a_compiler_says_to_sbatch_directly(tmp_path):
    """submit.sh builds the commit's native modules for its snapshot; where nothing can compile (a cluster
    user with the wheels), it says what is missing and that the wheels need no snapshot."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for name in ("submit.sh", "paths.sh"):  # this tree's, committed there
        shutil.copy(ROOT / "jobs" / name, clone / "jobs" / name)
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-q", "-a",
                    "-m", "this tree's submit.sh", "--allow-empty"], cwd=clone, check=True)
    compilers = ("cc", "gcc", "x86_64-linux-gnu-gcc", "c99", "c89", "clang", "nasm", "yasm", "cmake")
    env = {"PATH": path_without(tmp_path / "bin", *compilers), "HOME": str(tmp_path), "PYTHON": sys.executable,
           "CODE_DIR": str(tmp_path / "code")}
    done = run_script("bash", "jobs/submit.sh", "jobs/imagenet.sbatch", cwd=clone, env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stderr and "sbatch the job script directly" in done.stderr
    assert not list((tmp_path / "code").iterdir())  # no snapshot made, and no half-built one left


def test_a_wheel_build_that_fails_leaves_the_last_good_wheels_in_dist(tmp_path):
    """build_wheels.sh makes the new wheels apart and replaces dist/'s only once all are built and checked: here
    its build tools cannot be installed (a Python without venv), and the wheels of the last build stay."""
    clone = tmp_path / "clone"
    (clone / "jobs" / "release").mkdir(parents=True)
    for name in ("pillow_simd.sh", "release/build_wheels.sh", "release/bare_systems.sh"):
        shutil.copy(ROOT / "jobs" / name, clone / "jobs" / name)
    last_build = [clone / "dist" / name for name in ("imagenet_slurm-0.1-cp311-abi3-manylinux_2_28_x86_64.whl",
                                                     "pillow_simd-9.5-cp311-cp311-manylinux_2_28_x86_64.whl")]
    last_build[0].parent.mkdir()
    for wheel in last_build:
        wheel.write_bytes(b"the last good build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("nasm", "exit 0"), ("python-without-venv", 'if [[ $1 == -c ]]; then echo 3.11; else '
                                                                      'echo "No module named venv" >&2; exit 1; fi')):
        (bin_dir / name).write_text(f"#!/bin/bash\n{script}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHON": "python-without-venv",
           "SIMD_PYTHONS": "3.11"}
    done = run_script("bash", "jobs/release/build_wheels.sh", cwd=clone, env=env)
    assert done.returncode != 0 and "No module named venv" in done.stderr, done.stdout + done.stderr
    assert [wheel.read_bytes() for wheel in last_build] == [b"the last good build"] * 2


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
    assert warning and "jobs/install.sh" in line and "python -m shards.pillow_simd /path/to/wheels" in line


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


# ----------------------------------------------------------------------- the README's PIL line: shards.pillow_simd

def test_the_swap_plan_removes_nothing_until_a_fitting_wheel_is_in_hand(tmp_path):
    from shards.pillow_simd import NONE, SIMD, STOCK, exit_status, plan

    stock = ("Pillow 13.0.0 (libjpeg-turbo 3.2.0)", False)
    (tmp_path / "pillow_simd-12.1.1.post0-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    wheel = tmp_path / "fits.whl"

    kept = plan("x86_64", stock, None, tmp_path, "CPython 3.15.0")
    assert (kept.wheel, kept.ends) == (None, STOCK)
    for said in ("no pillow-simd wheel for CPython 3.15.0 on x86_64", str(tmp_path),
                 "it holds pillow_simd-12.1.1.post0-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "PIL stays Pillow 13.0.0 (libjpeg-turbo 3.2.0)", "slower", "jobs/release/build_wheels.sh"):
        assert said in kept.reason, (said, kept.reason)
    assert plan("aarch64", stock, None, tmp_path, "CPython 3.12.3") == plan("aarch64", stock, wheel, tmp_path, "")
    arm = plan("aarch64", stock, wheel, tmp_path, "CPython 3.12.3")
    assert arm.wheel is None and arm.ends == STOCK and "x86 only" in arm.reason
    assert plan("x86_64", ("pillow-simd 12.1.1.post0 (libjpeg-turbo 3.1.2)", True), wheel, tmp_path, "").ends == SIMD
    assert plan("x86_64", stock, wheel, tmp_path, "").wheel == wheel
    assert plan("x86_64", None, wheel, tmp_path, "").wheel == wheel  # a venv left with no PIL is mended
    assert plan("x86_64", None, None, tmp_path, "").ends == NONE

    assert [exit_status(ends, False) for ends in (SIMD, STOCK, NONE)] == [0, 0, 1]
    assert [exit_status(ends, True) for ends in (SIMD, STOCK, NONE)] == [0, 1, 1]


def simd_wheel_built_here() -> Path:
    """A pillow-simd wheel for this Python on the vendored libjpeg-turbo: jobs/install.sh's, or build_wheels.sh's."""
    python = "cp%d%d" % sys.version_info[:2]
    built = sorted((ROOT / "build" / "pillow-simd").glob(f"pillow_simd-*-{python}-*.whl")) or sorted(
        (ROOT / "dist").glob(f"pillow_simd-*-{python}-{python}-manylinux_2_28_x86_64.whl"))
    if not built or platform.machine() != "x86_64":
        pytest.skip("no pillow-simd wheel built here (bash jobs/install.sh, on x86-64)")
    return built[-1]


@pytest.fixture(scope="module")
def stock_venv(tmp_path_factory):
    """make(): a new venv with stock Pillow, that imports this tree's shards (what the swap runs)."""
    def make(with_pillow: bool = True) -> Path:
        venv = tmp_path_factory.mktemp("venv")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if with_pillow:
            subprocess.run([venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "pillow"],
                           check=True, capture_output=True)
        site = next(venv.glob("lib/python3.*/site-packages"))
        (site / "this_tree.pth").write_text(str(ROOT))
        return venv
    return make


def swap_in(venv: Path, wheels: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin/python", "-m", "shards.pillow_simd", str(wheels), *options],
                          cwd=venv, capture_output=True, text=True, timeout=300)


def pil_in(venv: Path) -> str:
    shown = subprocess.run([venv / "bin/python", "-c", "from shards.resources import pil_build; print(pil_build())"],
                           capture_output=True, text=True, cwd=venv)
    return shown.stdout.strip() or shown.stderr.strip().splitlines()[-1]


# The swap in real venvs (pip installs and uninstalls, about 35 s of the behaviour tier): the release tier's, with
# the install it belongs to; the swap's plan (what is removed when) is checked above on every push.
@pytest.mark.release
@pytest.mark.slow
def test_the_swap_keeps_pillow_where_no_wheel_fits_and_mends_a_venv_left_without_pil(stock_venv, tmp_path):
    """The day-one bug: `pip uninstall pillow && pip install pillow-simd` on a Python with no pillow-simd wheel
    left a venv with no PIL. A wheel for another Python (real wheel bytes, another Python's tag) or a damaged
    one must leave Pillow working; a venv the old lines broke gets pillow-simd."""
    wheel = simd_wheel_built_here()
    other = tmp_path / "other"
    other.mkdir()
    other_name = re.sub(r"-cp3\d+-cp3\d+-", "-cp399-cp399-", wheel.name)
    shutil.copy(wheel, other / other_name)
    venv = stock_venv()
    before = pil_in(venv)
    assert "Pillow" in before and "True" not in before

    kept = swap_in(venv, other)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "no pillow-simd wheel for CPython 3." in kept.stdout and other_name in kept.stdout
    assert pil_in(venv) == before
    assert swap_in(venv, other, "--require").returncode == 1  # jobs/install.sh's: stock Pillow is a failure there
    assert pil_in(venv) == before

    cut = tmp_path / "cut"  # a download cut short: pip refuses it before anything is removed
    cut.mkdir()
    (cut / wheel.name).write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    kept = swap_in(venv, cut)
    assert kept.returncode == 0 and "no pillow-simd wheel" in kept.stdout and "is invalid" in kept.stdout, kept.stdout
    assert pil_in(venv) == before

    damaged = tmp_path / "damaged"  # a wheel that installs but whose PIL does not import: Pillow is put back
    damaged.mkdir()
    with zipfile.ZipFile(wheel) as good, zipfile.ZipFile(damaged / wheel.name, "w") as bad:
        for item in good.infolist():
            data = good.read(item)
            bad.writestr(item, data[:4096] if item.filename.startswith("PIL/_imaging.") else data)
    restored = swap_in(venv, damaged)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "pillow-simd did not install" in restored.stdout and "is back" in restored.stdout, restored.stdout
    assert pil_in(venv) == before

    broken = stock_venv(with_pillow=False)  # what the README's old lines left on a Python with no wheel
    assert "No module named 'PIL'" in pil_in(broken)
    mended = swap_in(broken, wheel.parent)
    assert mended.returncode == 0, mended.stdout + mended.stderr
    assert "'pillow-simd 12." in pil_in(broken) and "True" in pil_in(broken)


@pytest.mark.release
@pytest.mark.slow
def test_the_swap_puts_pillow_simd_in_place_of_pillow_once(stock_venv):
    wheel = simd_wheel_built_here()
    venv = stock_venv()
    swapped = swap_in(venv, wheel.parent, "--require")
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    assert re.search(r"pillow_simd: Pillow \S+ \(libjpeg-turbo [\d.]+\) -> pillow_simd-", swapped.stdout), swapped.stdout
    assert "pillow_simd: PIL: pillow-simd 12." in swapped.stdout
    listed = subprocess.run([venv / "bin/python", "-m", "pip", "list", "--disable-pip-version-check"],
                            capture_output=True, text=True).stdout.lower()
    assert "pillow-simd" in listed and not re.search(r"^pillow ", listed, re.M)
    again = swap_in(venv, wheel.parent, "--require")
    assert again.returncode == 0 and "PIL is pillow-simd already" in again.stdout
    # a later pip install brings Pillow back beside it (torchvision's dependency), as the README warns: the rerun
    # it says to run swaps again (it failed once, pillow-simd still registered with its PIL/ gone)
    back = subprocess.run([venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "pillow"],
                          capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    rerun = swap_in(venv, wheel.parent, "--require")
    assert rerun.returncode == 0 and "pillow_simd: PIL: pillow-simd 12." in rerun.stdout, rerun.stdout + rerun.stderr


def test_the_swap_refuses_a_folder_that_is_not_one(tmp_path, capsys):
    from shards.pillow_simd import main

    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "nowhere")])
    assert stopped.value.code == 2
    assert "is not a folder: give the folder that holds the pillow_simd-*.whl wheels" in capsys.readouterr().err
