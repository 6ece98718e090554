"""Progress lines, one implementation for both stages: tqdm on a terminal, plain lines in logs."""

import io

from shards.progress import Progress


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_train_prints_a_line_every_n_steps_with_its_values_and_one_at_the_end():
    out = io.StringIO()
    with Progress("epoch 3 step", 7, "steps", every=3, initial=1, stream=out) as bar:
        for _ in range(6):
            bar.update(1, lambda: {"loss": "1.25"})
    got = lines(out)
    assert [line.split(" (")[0] for line in got] == ["epoch 3 step 3/7 steps", "epoch 3 step 6/7 steps",
                                                     "epoch 3 step 7/7 steps"]
    assert got[0].endswith(": loss 1.25")


def test_a_finished_read_ends_at_100_percent_whatever_was_counted():
    for counted in (84, 103):  # tar headers uncounted; a tree's size estimated from a sample
        out = io.StringIO()
        with Progress("train: read", 100, "MB", interval=3600, stream=out) as bar:
            bar.update(counted)
            bar.finish()
        (last,) = lines(out)
        assert f"train: read {max(100, counted)}/{max(100, counted)} MB (100%)" in last


def test_nothing_is_printed_when_disabled():
    out = io.StringIO()
    with Progress("epoch 0 step", 4, "steps", every=1, enabled=False, stream=out) as bar:
        bar.update(1, lambda: {"loss": "x"})
    assert out.getvalue() == ""
