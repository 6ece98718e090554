"""The PIL work whose speed depends on the PIL build, timed in whatever interpreter runs this file.

    python prepare/bench/pil_work.py IMAGES_DIR reencode|crop ROUNDS

Standalone on purpose (PIL only, no package of ours): prepare.bench.pil_builds runs it in a venv with
stock Pillow and in one with pillow-simd, side by side. Prints one JSON line: the PIL, and the seconds
of each round over every *.JPEG in IMAGES_DIR.

- reencode: what prepare does to each image it re-encodes (--resize 256, CMYK, greyscale, PNG):
  prepare/images.py's prepare_image, its decode (DCT-scaled by draft), LANCZOS resize and JPEG encode.
- crop: the ImageFolder baseline's per-sample work (train.decoder.pil_decode_crop): a crop of about
  half the image, DCT-scaled where it allows, resized with the bilinear filter to 224 x 224, flipped.
"""

import io
import json
import math
import sys
import time
from pathlib import Path

from PIL import Image, features


def reencode(data: bytes, max_side: int = 256) -> bytes:  # prepare/images.py, prepare_image's last branch
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    scale = max_side / max(width, height)
    target = (max(1, round(width * scale)), max(1, round(height * scale)))
    image.draft("RGB", target)
    image = image.convert("RGB")
    if image.size != target:
        image = image.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, subsampling="4:2:0", restart_marker_blocks=2)
    return out.getvalue()


def crop(data: bytes, size: int = 224) -> bytes:  # train/decoder.py's pil_decode_crop, on a fixed box
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    box = (width * 0.15, height * 0.15, width * 0.85, height * 0.85)
    shrink = min((box[2] - box[0]) / size, (box[3] - box[1]) / size)
    if shrink >= 2:
        image.draft("RGB", (math.ceil(width / shrink), math.ceil(height / shrink)))
    fx, fy = width / image.size[0], height / image.size[1]
    image = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR,
                                        box=(box[0] / fx, box[1] / fy, box[2] / fx, box[3] / fy))
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT).tobytes()


def main() -> None:
    folder, work, rounds = Path(sys.argv[1]), {"reencode": reencode, "crop": crop}[sys.argv[2]], int(sys.argv[3])
    blobs = [path.read_bytes() for path in sorted(folder.glob("*.JPEG"))]
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        for data in blobs:
            work(data)
        seconds.append(time.perf_counter() - start)
    import PIL

    pil = f"{PIL.__version__} (libjpeg-turbo {features.version('libjpeg_turbo')})"
    print(json.dumps({"pil": pil, "images": len(blobs), "seconds": seconds}))


if __name__ == "__main__":
    main()
