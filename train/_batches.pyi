"""Types of train._batches (train/native/batches.c), the host's normalisation of a decoded batch
that train/device_batches.py wraps (normalised_on_host). At run time the module takes any
C-contiguous buffer whose items are of that kind and size (checked before the GIL is released:
TypeError or ValueError otherwise)."""

import numpy as np
import numpy.typing as npt


def normalise(images: npt.NDArray[np.uint8], out: npt.NDArray[np.float32], mean: npt.NDArray[np.float32],
              std: npt.NDArray[np.float32], planar: bool = False) -> None: ...
