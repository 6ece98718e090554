"""PIL as pillow-simd, in place of the stock Pillow that torchvision pulls in: the README's last install line.

    python -m shards.pillow_simd /path/to/wheels

pillow-simd and Pillow both install the package PIL, so one must leave before the other comes, and pip
cannot swap them in one step: `pip uninstall pillow` followed by a failed `pip install pillow-simd` (no
wheel for this Python, and no compiler for its source release, as on every cluster node) leaves no PIL
at all, and neither stage starts. Here nothing is removed until a pillow-simd wheel that pip would
install on this interpreter is in hand; where there is none (aarch64: pillow-simd's SIMD is x86 only; a
Python the wheels were not built for), stock Pillow stays and one line says so and what it costs.
After the swap a new interpreter reports which PIL imports, and the swap is undone if it is not
pillow-simd. A venv left with no PIL by an earlier, failed swap gets pillow-simd too. Exit 0 where the
venv ends with a working PIL, 1 where it ends with none or, with `--require`, with stock Pillow; 2 for
a wrong argument.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shards.paths import user_path

# Measured side by side (BENCHMARKS.md, "PIL: pillow-simd against stock Pillow": prepare.bench.pil_builds, 2 vCPUs
# of an AMD EPYC, 2026-12-02): stock Pillow 13.0 re-encodes at 0.46-0.47x pillow-simd's speed, crops at 0.75-0.79x.
STOCK_COST = ("prepare's re-encodes (--resize, CMYK, greyscale, PNGs) run about 2.1x slower and the ImageFolder "
              "baseline's PIL crops about 1.3x, and the re-encoded images' bytes differ from a development build's "
              "(training's own decoder is unchanged)")


SIMD, STOCK, NONE = "pillow-simd", "stock Pillow", "no PIL"  # what a venv ends with


@dataclass(frozen=True)
class Plan:
    """Swap in `wheel`, or leave the venv with `ends` as it is; `reason` is said in one line."""
    wheel: Path | None
    ends: str
    reason: str


def wants_wheel(machine: str, simd: bool) -> bool:
    return not simd and is_x86(machine)


def is_x86(machine: str) -> bool:
    return machine in ("x86_64", "amd64")


def plan(machine: str, pil: tuple[str, bool] | None, wheel: Path | None, wheels: Path, python: str,
         pip_said: str = "") -> Plan:
    """The decision, apart from pip: `pil` is shards.resources.pil_build()'s (text, is pillow-simd), None
    where no PIL imports; `wheel` the pillow-simd wheel that fits this interpreter, if any (if not, `pip_said` why)."""
    text, simd = pil if pil is not None else (NONE, False)
    ends = NONE if pil is None else STOCK
    if simd:
        return Plan(None, SIMD, f"PIL is pillow-simd already: {text}")
    if not is_x86(machine):
        return Plan(None, ends, f"pillow-simd's SIMD is x86 only: on {machine} PIL stays {text}, as expected")
    if wheel is None:
        pip_said = f"; pip: {pip_said}" if pip_said else ""
        return Plan(None, ends, f"no pillow-simd wheel for {python} on {machine} in {wheels} "
                                f"({listed_wheels(wheels)}{pip_said}): PIL stays {text}; {STOCK_COST}. "
                                "`bash jobs/release/build_wheels.sh` builds one for CPython 3.11 to 3.14 (docs/install.md)")
    return Plan(wheel, SIMD, f"{text} -> {wheel.name}")


def listed_wheels(wheels: Path) -> str:
    names = sorted(p.name for p in wheels.glob("pillow_simd-*.whl"))
    return "it holds " + ", ".join(names) if names else "it holds no pillow_simd-*.whl"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)


def fitting_wheel(wheels: Path, into: Path) -> tuple[Path | None, str]:
    """The pillow-simd wheel in `wheels` that pip would install on this interpreter, copied into `into`, or
    None and pip's reason where none fits (pip decides: tags, Python, platform, a readable wheel)."""
    got = pip("download", "--no-index", "--no-deps", "--only-binary", ":all:", "--find-links", str(wheels),
              "--dest", str(into), "pillow-simd")
    found = sorted(into.glob("pillow_simd-*.whl"))
    return (found[0], "") if got.returncode == 0 and found else (None, last_line(got))


def installed_pil() -> tuple[str, bool]:
    """pil_build() as a new interpreter sees it (this one may hold the old PIL's modules)."""
    code = "from shards.resources import pil_build; text, simd = pil_build(); print(int(simd), text)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if shown.returncode != 0:
        return f"no PIL ({last_line(shown)})", False
    simd, text = shown.stdout.strip().split(" ", 1)
    return text, simd == "1"


def pillow_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("pillow")
    except importlib.metadata.PackageNotFoundError:
        return None


def swap(wheel: Path) -> tuple[str, str]:
    """Stock Pillow out, `wheel` in; Pillow back where pillow-simd does not end up as the PIL that imports.
    (what the venv ends with, the line to say)"""
    stock = pillow_version()
    if stock is not None:
        removed = pip("uninstall", "-y", "pillow")
        if removed.returncode != 0:
            return STOCK, f"pip uninstall pillow failed, nothing changed: {last_line(removed)}"
    # --force-reinstall: a pip install that brought Pillow back beside pillow-simd (torchvision's dependency) left
    # pillow-simd registered, its PIL/ files gone with Pillow's uninstall, and pip would see it there already
    installed = pip("install", "--no-deps", "--no-index", "--force-reinstall", str(wheel))
    text, simd = installed_pil()
    if installed.returncode == 0 and simd:
        return SIMD, f"PIL: {text}"
    why = last_line(installed) if installed.returncode else f"it installed, but what imports is {text}"
    pip("uninstall", "-y", "pillow-simd")
    if stock is None:
        return NONE, f"pillow-simd did not install ({why}); there was no Pillow before: `pip install pillow`"
    back = pip("install", "--no-deps", f"pillow=={stock}")
    if back.returncode != 0:
        return NONE, (f"pillow-simd did not install ({why}), and Pillow {stock} could not be put back "
                      f"({last_line(back)}): `pip install pillow=={stock}`")
    return STOCK, f"pillow-simd did not install ({why}); Pillow {stock} is back"


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    if lines:
        return lines[-1]
    return f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shards.pillow_simd", description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", type=user_path,
                        help="the folder jobs/release/build_wheels.sh wrote (dist/), or any holding pillow_simd-*.whl")
    parser.add_argument("--require", action="store_true",
                        help="exit 1 where PIL does not end up as pillow-simd (jobs/install.sh)")
    args = parser.parse_args(argv)
    if not args.wheels.is_dir():
        parser.error(f"{args.wheels} is not a folder: give the folder that holds the pillow_simd-*.whl wheels")
    return args


def current_pil() -> tuple[str, bool] | None:
    from shards.resources import pil_build

    try:
        return pil_build()
    except ImportError:  # no PIL: an earlier swap removed Pillow and failed to install pillow-simd
        return None


def exit_status(ends: str, require: bool) -> int:
    return 0 if ends == SIMD or (ends == STOCK and not require) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine, pil = platform.machine().lower(), current_pil()
    with tempfile.TemporaryDirectory(prefix="pillow-simd-") as scratch:
        wanted = wants_wheel(machine, pil is not None and pil[1])
        wheel, pip_said = fitting_wheel(args.wheels, Path(scratch)) if wanted else (None, "")
        decided = plan(machine, pil, wheel, args.wheels, f"CPython {platform.python_version()}", pip_said)
        print(f"pillow_simd: {decided.reason}")
        ends = decided.ends
        if decided.wheel is not None:
            ends, said = swap(decided.wheel)
            print(f"pillow_simd: {said}")
    return exit_status(ends, args.require)


if __name__ == "__main__":
    sys.exit(main())
