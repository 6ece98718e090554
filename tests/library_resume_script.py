"""Run by tests/test_launchers.py in two ranks started as torchrun starts them: one rank of a loop over ImageNetLoader that stops
mid-epoch and saves its state (rank 0 alone), or resumes from it, or reads the epoch whole; each
batch's digest goes to OUT.rankN.

    python library_resume_script.py DATA whole|stop|resume STATE OUT [BATCHES_BEFORE_STOP]
"""

import hashlib
import json
import sys

import torch.distributed as dist

from train import ImageNetLoader

EPOCH = 2

root, mode, state_path, out = sys.argv[1:5]
dist.init_process_group("gloo")
rank = dist.get_rank()
with ImageNetLoader(root, "train", batch_size=4, image_size=32, device="cpu", workers=1) as loader:
    if mode == "resume":
        loader.load_state_dict(json.loads(open(state_path).read()))
    digests = []
    for epoch in range(EPOCH, EPOCH + 1):
        loader.set_epoch(epoch)
        for images, labels in loader:
            digests.append(hashlib.blake2b(images.numpy().tobytes() + labels.numpy().tobytes(),
                                           digest_size=8).hexdigest())
            if mode == "stop" and len(digests) == int(sys.argv[5]):
                state = loader.state_dict()
                if rank == 0:  # the same on every rank: rank 0 saves it alone
                    open(state_path, "w").write(json.dumps(state))
                break
    with open(f"{out}.rank{rank}", "w") as f:
        f.write(json.dumps({"digests": digests, "state": loader.state_dict()}))
dist.barrier()
dist.destroy_process_group()
