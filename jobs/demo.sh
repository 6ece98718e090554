#!/usr/bin/env bash
# The demo, end to end on the built-in sample data, on this machine's CPUs:
# install, write a small ImageNet in the official archive layout, prepare shards.
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install.sh
py=.venv/bin/python
out=${DEMO_DIR:-demo}
$py -m prepare.sample "$out/source"
$py -m prepare --source "$out/source" --dest "$out/imagenet" --shard-size 2
echo "demo: shards in $out/imagenet, manifest $out/imagenet/manifest.json"
