"""What a prepared dataset's images are, as one line of JSON: sha256 of every JPEG in its shards (in
shard and member order) and of crops decoded from them by the installed decoder.

    python jobs/release/pixels_digest.py DATASET      (the --dest of `python -m prepare`)

jobs/release/check_bare_install.sh runs it on the demo's shards prepared by the wheels on a bare system and by
the development build, and compares: the same sample data must give the same bytes and pixels.
Standalone on purpose: it runs where only the installed wheel is, not this repository.
"""

import hashlib
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

from train.decoder import Images, decode_crops, image_sizes


def jpegs(dataset: Path) -> list[bytes]:
    found = []
    for shard in sorted(dataset.glob("*/*.tar")):
        with tarfile.open(shard) as tar:
            found += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")]
    return found


def crops(blobs: list[bytes], size: int = 64) -> bytes:
    """Each image whole and its centre half, both flipped and not, at size x size (bilinear)."""
    images = Images.from_blobs([b for b in blobs for _ in range(2)])
    dims, status = image_sizes(images)
    w, h = dims[:, 0].astype(np.float32), dims[:, 1].astype(np.float32)
    whole = np.stack([0 * w, 0 * h, w, h], axis=1)
    centre = np.stack([w / 4, h / 4, 3 * w / 4, 3 * h / 4], axis=1)
    boxes = np.where((np.arange(len(images)) % 2 == 0)[:, None], whole, centre)
    out = np.zeros((len(images), size, size, 3), np.uint8)
    status = decode_crops(images, boxes, np.arange(len(images)) % 3 == 0, out, 0)
    return out.tobytes() + status.tobytes()


def main(dataset: str) -> None:
    blobs = jpegs(Path(dataset))
    if not blobs:
        sys.exit(f"pixels_digest.py: no JPEG in the shards under {dataset}")
    print(json.dumps({"images": len(blobs), "jpeg_bytes": hashlib.sha256(b"".join(blobs)).hexdigest(),
                      "crops": hashlib.sha256(crops(blobs)).hexdigest()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
