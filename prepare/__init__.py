"""Stage 1: ImageNet (official archives, an extracted tree, or Kaggle's layout) to node-local,
globally shuffled WebDataset shards with exact labels. Run once per node: python -m prepare."""
