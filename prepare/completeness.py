"""Complete or refused: what a download declares each split holds, against what prepare finds.

Every layout declares what it can (`Source.declared`): the pieces its declaration lists and which of
them are not there (`Gap`: train archives in the loading script, shards in _info.json, Parquet files
by their -of-N names, class folders in the devkit or LOC_synset_mapping.txt, images in the ground
truth or Kaggle's lists), and how many images the split holds (`Declared.images`). Nothing here
touches a file: the layouts find, these functions decide.

- `shortfall`: before anything is read or written, one line naming what is missing, or None.
- `counted_shortfall`: after a split is read, where only reading can count it (a gzip stream).
- `imagenet_1k_warning`: where a download declares nothing, ImageNet-1k's own counts (1,281,167
  train and 50,000 val images in 1,000 classes) give a warning, not a refusal.

prepare refuses a shortfall unless --allow-partial, which logs it and records it in the manifest
(`partial`); the warnings go to the manifest's `warnings`. `judged` is that decision, the one place it
is made, before a read and after.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_1K_IMAGES = {"train": 1_281_167, "val": 50_000}
IMAGENET_1K_CLASSES = 1000
NAMED = 3  # missing pieces a line names; the rest are counted


@dataclass(frozen=True)
class Gap:
    """Pieces a declaration lists and which of them are not there."""
    pieces: str  # what they are, plural: "train archives", "shards", "Parquet files", "class folders", "images"
    listed: int  # how many the declaration lists
    by: str  # what lists them: "imagenet-1k.py", "_info.json", "the devkit's ground truth", ...
    missing: tuple[str, ...] = ()  # the absent ones, by name, in the declaration's order
    count: int | None = None  # how many are absent, where `missing` names groups of them ("42/ (3)")

    @property
    def absent(self) -> int:
        return len(self.missing) if self.count is None else self.count


@dataclass(frozen=True)
class Declared:
    """What a download says one split holds, and what of it is there before anything is read."""
    split: str
    gaps: tuple[Gap, ...] = ()  # each list of pieces the download declares (with nothing missing: complete)
    images: int | None = None  # how many images it says the split holds (None: it says nothing)
    images_by: str | None = None  # who says so
    found: int | None = None  # images found before reading (listings, Parquet footers); None: only reading counts


def gap_line(gap: Gap) -> str:
    names = ", ".join(gap.missing[:NAMED]) + (f" and {len(gap.missing) - NAMED} more" if len(gap.missing) > NAMED
                                                else "")
    return f"{gap.absent:,} of the {gap.listed:,} {gap.pieces} {gap.by} lists ({names})"


def shortfall(declared: Declared) -> str | None:
    """One line naming what the split lacks against its declaration, before reading; None if nothing.
    Pure."""
    lines = [gap_line(gap) for gap in declared.gaps if gap.absent]
    if counted_short(declared):
        lacking = declared.images - declared.found
        lines.append(f"{lacking:,} of the {declared.images:,} images {declared.images_by} declares ({declared.found:,} "
                     "are there)")
    return f"the {declared.split} split lacks " + "; ".join(lines) if lines else None


def counted_short(declared: Declared) -> bool:
    """Whether the count found before reading falls short of the declared one, by other than what a gap
    of images by the same declaration already says: by more, images are missing that no list names; by
    less, images are over elsewhere (another class), which the count's line then tells of."""
    if declared.images is None or declared.found is None or declared.found >= declared.images:
        return False
    said = sum(gap.absent for gap in declared.gaps if gap.pieces == "images" and gap.by == declared.images_by)
    return said != declared.images - declared.found


def excess(declared: Declared, count: int | None) -> str | None:
    """A split that holds more images than its declaration says: the declaration belongs to another
    download (or files of another were mixed in). Never allowed: one line, or None. Pure."""
    if declared.images is None or count is None or count <= declared.images:
        return None
    return (f"the {declared.split} split holds {count:,} images, {declared.images_by} declares {declared.images:,}: "
            "they do not belong together (files of another download mixed in, or the declaration of another "
            "version). Keep only one download's files")


def counted_shortfall(declared: Declared, got: int) -> str | None:
    """After the split is read: fewer images than declared, where the listing could not count them
    before (found is None). Pure."""
    if declared.images is None or got >= declared.images or declared.found is not None:
        return None
    return (f"the {declared.split} split yielded {got:,} of the {declared.images:,} images "
            f"{declared.images_by} declares")


def imagenet_1k_warning(split: str, classes: int, got: int) -> str | None:
    """Where the download declares no count: a split of a 1,000-class source whose count is not
    ImageNet-1k's. A warning (subsets and other versions exist), recorded in the manifest. Pure."""
    expected = IMAGENET_1K_IMAGES.get(split)
    if expected is None or classes != IMAGENET_1K_CLASSES or got == expected:
        return None
    return (f"the {split} split holds {got:,} images where ImageNet-1k's holds {expected:,}, and nothing in the "
            "download declares its count: check that nothing is missing")


def numbering_gap(numbers: list[int], name, pieces: str) -> Gap:
    """The gaps in files numbered from 0 (train_images_0.tar.gz, imagenet1k-train-0000.tar, ...), where
    nothing else declares how many there are: the highest number present says how many at least.
    `name(n)` is file n's name. Pure."""
    present = set(numbers)
    listed = max(numbers) + 1 if numbers else 0
    return Gap(pieces, listed, "the numbering of the files present",
               tuple(name(n) for n in range(listed) if n not in present))


def refusal(lines: list[str]) -> str:
    """The one-line refusal of every shortfall of a download."""
    return ("; ".join(lines) + ". The download is incomplete: download what is missing, or rerun with "
            "--allow-partial to prepare what is there (the manifest then records what is missing)")


def judged(shortfalls: list[str], excesses: list[str], allow_partial: bool) -> tuple[str | None, list[str]]:
    """The one judgement of a download's completeness, before a read (what its declaration lacks) and
    after one (what only reading could count): (the refusal, or None; the shortfalls --allow-partial
    lets through, for the caller to log: the manifest records them). More than declared is refused
    either way: the download is another one. Pure."""
    if excesses:
        return "; ".join(excesses), []
    if shortfalls and not allow_partial:
        return refusal(shortfalls), []
    return None, shortfalls


def nothing_there(declared: Declared) -> bool:
    """Whether none of the split is there: refused even with --allow-partial. Pure."""
    return declared.found == 0 or any(gap.listed and gap.absent >= gap.listed for gap in declared.gaps)
