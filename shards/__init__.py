"""The on-disk contract between `prepare` and `train`.

`prepare` writes and `train` reads exactly what this package describes: where shards live and
how they are named (`paths`), what a shard holds (`format`), the manifest that marks a dataset
complete (`manifest`), and the small helpers both stages need the same way (CPU count, progress
lines). It imports neither stage.
"""
