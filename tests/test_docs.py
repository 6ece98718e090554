"""The documents: every link between them leads somewhere (a file that exists, a heading it names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT

DOCUMENTS = sorted([*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("third_party/*/*.md"),
                    *ROOT.glob("jobs/*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (a link's or code's, without the marks) lower-cased, what is
    neither a word character, a space nor a hyphen dropped, each space a hyphen. Pure."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    """Its headings' anchors (a repeated one also as GitHub numbers it: -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.*)$", CODE_BLOCK.sub("", document.read_text()), re.M):
        anchor = github_anchor(heading)
        found.add(anchor if anchor not in seen else f"{anchor}-{seen[anchor]}")
        seen[anchor] = seen.get(anchor, 0) + 1
    return found


def test_github_anchor_drops_punctuation_and_keeps_each_space():
    assert github_anchor("Beyond ImageNet-1k: ImageNet-21k, -22k and timm's 12k") == \
        "beyond-imagenet-1k-imagenet-21k--22k-and-timms-12k"
    assert github_anchor("Set-up, demo and tests (a fresh Debian machine, as root)") == \
        "set-up-demo-and-tests-a-fresh-debian-machine-as-root"
    assert github_anchor("`--decode gpu` on [the H100](x.md)") == "--decode-gpu-on-the-h100"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_a_file_of_the_repository_and_its_heading_resolves(document):
    broken = []
    for target in LINK.findall(CODE_BLOCK.sub("", document.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not followed here
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def gigabytes(figure: str) -> float:
    """'1.31 TB' or '560 GB' in GB. Pure."""
    number, unit = figure.split()
    return float(number) * (1000 if unit == "TB" else 1)


def test_the_readmes_disk_figures_for_the_full_imagenets_are_the_range_of_prepares_table():
    """README's --tmp line sums up docs/prepare.md's table of the disk each dataset needs: its ranges for
    ImageNet-21k/22k are the table's smallest and largest figures of those rows, at full size, 384 and 256 px."""
    table = re.search(r"^\| dataset \| full size .*?\n\|---.*?\n((?:\|.*\n)+)", (ROOT / "docs/prepare.md").read_text(),
                      re.M).group(1)
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    full_ones = [row for row in rows if not row[0].startswith("ImageNet-1k")]
    columns = {"full": [gigabytes(row[1]) for row in full_ones], "384": [gigabytes(row[3]) for row in full_ones],
               "256": [gigabytes(row[4]) for row in full_ones]}
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"ImageNet-21k/22k \([^)]*\) ([\d.]+)-([\d.]+) TB, (\d+)-(\d+) GB and (\d+)-(\d+) GB", readme)
    assert said, "README's --tmp line no longer gives ImageNet-21k/22k's ranges"
    low_tb, high_tb, *gb = (float(figure) for figure in said.groups())
    assert (low_tb * 1000, high_tb * 1000) == (min(columns["full"]), max(columns["full"]))
    assert tuple(gb) == (min(columns["384"]), max(columns["384"]), min(columns["256"]), max(columns["256"]))
