#!/usr/bin/env bash
# The demo, end to end on the built-in sample data, on this machine's CPUs: install, write a small
# ImageNet in the official archive layout, prepare shards, train a ResNet-18 on them, plot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install.sh
py=.venv/bin/python
out=${DEMO_DIR:-demo}
$py -m prepare.sample "$out/source"
# --force: the demo owns its shards; a demo source from an older version is replaced, not refused
$py -m prepare --source "$out/source" --dest "$out/imagenet" --shard-size 2 --force
rm -rf "$out/run"
$py -m train --data "$out/imagenet" --run-dir "$out/run" --device cpu --arch resnet18 --image-size 64 \
    --epochs 8 --batch-size 32 --lr 0.8 --warmup-epochs 1
$py -m train.report "$out/run"
echo "demo: metrics in $out/run/metrics.jsonl (chance is 10% top-1)"
