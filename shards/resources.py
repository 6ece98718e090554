"""How many CPUs, and how much memory, this task may use: the one place both stages ask."""

from __future__ import annotations

import os
import resource
from pathlib import Path


MB = 1 << 20  # bytes: the unit of prepare's sizes and rates


def available_cpus(environ=os.environ) -> int:
    """CPUs this process may use: its affinity mask, capped by SLURM_CPUS_PER_TASK when set.

    The cap matters where SLURM does not pin tasks (TaskPlugin=task/none): the mask then shows the
    whole node while the job was granted only --cpus-per-task of it.
    """
    cpus = len(os.sched_getaffinity(0))
    granted = environ.get("SLURM_CPUS_PER_TASK", "")
    if granted.isdigit() and int(granted) > 0:
        cpus = min(cpus, int(granted))
    return max(1, cpus)


UNLIMITED = 1 << 60  # a cgroup v1 memory limit of this or more is none (v1 says "no limit" as 2**63 rounded to a page)


def memory_limit(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The most memory this process's node lets it hold, in bytes: the node's (MemTotal), or less where a cgroup
    limits it (a SLURM job's --mem under TaskPlugin=task/cgroup, a container's): the least limit from the process's
    cgroup up. The same for every task of a job on a node, whenever it asks (what is free is neither). None where
    the node's figure is not there (no /proc/meminfo: not Linux)."""
    try:
        node = mem_total((proc / "meminfo").read_text())
        membership = (proc / "self" / "cgroup").read_text()
    except OSError:
        return None
    limits = [limit for folder in cgroup_folders(membership, cgroups) if (limit := cgroup_limit(folder)) is not None]
    return min([node, *limits]) if node is not None else None


def mem_total(meminfo: str) -> int | None:
    """/proc/meminfo's MemTotal in bytes. Pure."""
    for line in meminfo.splitlines():
        name, _, value = line.partition(":")
        if name == "MemTotal" and value.split() and value.split()[0].isdigit():
            return int(value.split()[0]) * 1024
    return None


def cgroup_folders(membership: str, cgroups: Path) -> list[Path]:
    """The folders of this process's memory cgroup and every one above it (a limit may be set on the job's, above
    its step's and task's), from /proc/self/cgroup's lines: v1's `N:memory:/path` under cgroups/memory, v2's
    `0::/path` under cgroups (or cgroups/unified, beside v1). Pure."""
    folders = []
    for line in membership.splitlines():
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        roots = ([cgroups / "memory"] if "memory" in controllers.split(",") else
                 [cgroups, cgroups / "unified"] if controllers == "" and path.startswith("/") else [])
        parts = Path(path).parts[1:]
        folders += [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1) for root in roots]
    return folders


def cgroup_limit(folder: Path) -> int | None:
    """The memory limit of the cgroup at `folder` (v2's memory.max, v1's memory.limit_in_bytes), or None where it
    sets none (or is not there)."""
    for name in ("memory.max", "memory.limit_in_bytes"):
        try:
            limit = (folder / name).read_text().strip()
        except OSError:
            continue
        return int(limit) if limit.isdigit() and int(limit) < UNLIMITED else None  # v2 says none as "max"
    return None


def raise_open_file_limit() -> None:
    """Lift the soft limit on open files to the hard one: prepare's workers keep a spill file per
    bucket open (700 for ImageNet's train; fewer, reopened, where the limit is lower: prepare/spills.py).
    (Training's memory maps of the shards hold no file: train/shard_index.py's `mapped`.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def pil_build() -> tuple[str, bool]:
    """('pillow-simd 12.1.1.post0 (libjpeg-turbo 3.1.2)', True) for the PIL that imports.

    torchvision depends on stock Pillow, so an install in the wrong order silently puts stock
    Pillow (no SIMD resize) over pillow-simd; the distribution that owns the PIL package tells.
    """
    import importlib.metadata

    import PIL
    from PIL import features

    try:
        simd_version = importlib.metadata.version("pillow-simd")
    except importlib.metadata.PackageNotFoundError:
        simd_version = None
    # Both distributions can be installed at once, the later one's files on top: the version
    # string compiled into the PIL that imports says whose files they are.
    simd = simd_version == PIL.__version__
    owner = "pillow-simd" if simd else "Pillow"
    # the libjpeg PIL was built with (pillow-simd from jobs/install.sh or the wheels: the vendored one)
    jpeg = "libjpeg-turbo" if features.check_feature("libjpeg_turbo") else "libjpeg"
    version = features.version("libjpeg_turbo" if jpeg == "libjpeg-turbo" else "jpg")
    jpeg = f"{jpeg} {version}" if version else jpeg
    return f"{owner} {PIL.__version__} ({jpeg})", simd


def pil_build_note(text: str, simd: bool, machine: str) -> tuple[bool, str]:
    """(is it a warning, the line) for the PIL that imports: stock Pillow is expected where pillow-simd
    has no SIMD (it is x86 only), and a slow path to fix on x86-64."""
    if simd:
        return False, f"PIL: {text}"
    if machine not in ("x86_64", "amd64"):
        return False, f"PIL: {text}: stock Pillow, as expected on {machine} (pillow-simd's SIMD is x86 only)"
    return True, (f"PIL: {text}: stock Pillow, not pillow-simd; PIL's decode and resize run slower. To fix: rerun "
                  "jobs/install.sh (it installs pillow-simd last), or with the wheels `python -m shards.pillow_simd "
                  "/path/to/wheels` (docs/install.md)")


def log_pil_build(log) -> None:
    import platform

    warning, line = pil_build_note(*pil_build(), platform.machine().lower())
    (log.warning if warning else log.info)("%s", line)


def evict_from_page_cache(paths) -> None:
    """Drop these files' cached pages (posix_fadvise DONTNEED), so that the next read is a cold one
    (benchmarks: no root needed, unlike /proc/sys/vm/drop_caches). Written out first: DONTNEED drops
    only clean pages, and a file written moments before (the ImageFolder train.bench extracts) would
    stay in memory."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
