"""python -m train.bench --data DIR: images/s of our data path against what users run today.

Modes (--modes, comma-separated):
  data   the loader alone (decode + augment + batch, no model): ours, the ImageFolder baseline and,
         when installed, NVIDIA DALI's CPU pipeline, on the same images and the same worker counts;
         a cold pass (the shards evicted from the page cache first) and warm passes; per-worker RSS;
         and the decode-only ceiling (full-resolution decode, fastest decoder, one core).
  model  synthetic uint8 batches already on the device through the training step: the ceiling
         of the accelerator (or CPU).
  feed   our loader onto the device with no model (the host-to-device copy, or with --decode gpu
         the device decode, in DeviceBatches' background thread): what the data path could feed.
  full   our loader feeding the training step, end to end, as python -m train runs it.

--rounds N (3) interleaved rounds at every worker count, each ratio the median of its rounds. Prints a
table, then one block of every loader ratio (ours against the ImageFolder baseline, DALI, the fastest
full decode per core, plain shards given as --baseline-data, and the public ImageNetLoader against the
Loader it wraps) with each round's value; appends one JSON line to RUN_DIR/benchmark.jsonl and
draws RUN_DIR/benchmark.png (images/s against worker count, ours and the baseline). Under srun each
rank measures its own share and images/s are summed over ranks.

It uses train's public pieces (the loader, the model, the optimiser, the training step) and is
never imported by the product.
"""
