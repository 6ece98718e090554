"""Stage 1: ImageNet as users downloaded it (the official archives, an extracted tree, Kaggle's layout
or zip, the hub's Parquet and tars, timm's WebDataset shards, image-net.org's full releases: the
registry of prepare/sources/) to node-local, globally shuffled WebDataset shards with exact labels. Run
once per node: python -m prepare."""
