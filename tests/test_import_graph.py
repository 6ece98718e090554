"""The house's shape, read from the sources (tests/import_graph.py): the library and the run as two
wings of train/, the library below; no import circle in either stage."""

import pytest

from import_graph import arrows, circle, floors, modules

DOORS = {"train.__main__", "train.report", "train.evaluate"}  # `python -m train`, `... train.report`, `... train.evaluate`:
# the run's, at users' names


def library_and_run() -> tuple[dict[str, set[str]], set[str], set[str]]:
    graph = arrows(modules("train", leave_out=("train.bench",)))
    run = {name for name in graph if name == "train.run" or name.startswith("train.run.")}
    return graph, set(graph) - run - DOORS, run


def test_the_library_never_imports_the_run():
    graph, library, run = library_and_run()
    assert run and library
    assert not {(name, target) for name in library for target in graph[name] if target in run}


def test_the_doors_only_open_into_the_run():
    graph, library, run = library_and_run()
    for door in DOORS:
        assert graph[door] and graph[door] <= run, (door, graph[door])


@pytest.mark.parametrize("package", ["train", "prepare", "shards"])
def test_no_stage_imports_in_a_circle(package):
    graph = arrows(modules(package))
    assert circle(graph) is None
    assert floors(graph) >= 2


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circle(graph) == ["a", "b", "c", "a"]
    with pytest.raises(ValueError, match="a -> b -> c -> a"):
        floors(graph)
    assert circle({"a": {"b"}, "b": set()}) is None and floors({"a": {"b"}, "b": set()}) == 2


def test_the_augmentation_room_imports_nothing_of_the_data_path_that_runs_it():
    """The loader runs the augmentation's stages (its draws, its device side, MixUp/CutMix on tensors):
    the arrow points from the data path to the augmentation, never back."""
    graph, _, _ = library_and_run()
    data_path = {"train.loader", "train.imagenet_loader", "train.device_batches", "train.device_decode",
                 "train.shard_index"}
    augment = {name for name in graph if name.startswith("train.augment")}
    assert augment and not {(name, target) for name in augment for target in graph[name] if target in data_path}


def test_the_sources_read_downloads_with_their_own_toolkit_and_point_nowhere_above():
    """The tars, trees, Kaggle's zip, the class lists and winter21's seek index lie in prepare/sources/, and
    what the sources import of the rest of prepare imports nothing of prepare's at all (no arrow back up)."""
    graph = arrows(modules("prepare", leave_out=("prepare.bench",)))
    sources = {name for name in graph if name == "prepare.sources" or name.startswith("prepare.sources.")}
    for tool in ("tars", "trees", "zip_tree", "class_lists", "gzip_index"):
        assert f"prepare.sources.{tool}" in sources and f"prepare.{tool}" not in graph
    below = {target for name in sources for target in graph[name] if target not in sources}
    assert below == {"prepare.completeness", "prepare.labels"}
    assert not {target for name in below for target in graph[name] if target.startswith("prepare.")}


def test_only_a_winter21_stream_imports_rapidgzip():
    """Every `python -m prepare` detects its layout among all of them: none but winter21's inflating reader
    may load rapidgzip (a fresh interpreter: this one may have it already)."""
    import subprocess
    import sys

    code = ("import sys; import prepare.cli, prepare.builder, prepare.shared_read, prepare.sizing; "
            "from prepare.sources import layouts; layouts(); import prepare.sources.gzip_index; "
            "print('rapidgzip' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
