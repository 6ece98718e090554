#!/usr/bin/env bash
# The demo, end to end on the built-in sample data, on this machine's CPUs: install, write a small
# ImageNet in the official archive layout, prepare shards, train a ResNet-18 on them, plot.
#
#   bash jobs/demo.sh                   in the clone's demo/
#   DEMO_DIR=my-demo bash jobs/demo.sh  in my-demo, relative to the folder it is called from
set -euo pipefail
source "$(dirname "$0")/paths.sh"
# a DEMO_DIR given is the caller's, made absolute before the cd to the clone (a relative one landed inside the clone)
given=${DEMO_DIR:+$(absolute "$DEMO_DIR")}
cd "$(dirname "$0")/.."
bash jobs/install.sh
py=.venv/bin/python
out=${given:-demo}
$py -m prepare.sample "$out/source"
# --force: the demo owns its shards; a demo source from an older version is replaced, not refused
$py -m prepare --source "$out/source" --dest "$out/imagenet" --shard-size 2 --force
rm -rf "$out/run"
$py -m train --data "$out/imagenet" --run-dir "$out/run" --device cpu --arch resnet18 --image-size 64 \
    --epochs 8 --batch-size 32 --lr 0.8 --warmup-epochs 1
$py -m train.report "$out/run"
echo "demo: metrics in $out/run/metrics.jsonl (chance is 10% top-1)"
