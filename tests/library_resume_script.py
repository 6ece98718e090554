"""Run by tests/test_launchers.py in ranks started by torchrun, or as torchrun starts them: one rank of a
loop over ImageNetLoader that stops mid-epoch and saves its state (rank 0 alone), or resumes from it (on
any world size: each rank's batch is the global batch of 8 shared out), or reads the epoch whole; each
batch's digest, and each sample's (by its key hash), go to OUT.rankN.

    python library_resume_script.py DATA whole|stop|resume STATE OUT [BATCHES_BEFORE_STOP]
"""

import hashlib
import json
import sys

import torch.distributed as dist

from train import ImageNetLoader

EPOCH, GLOBAL_BATCH = 2, 8


def digest(*tensors) -> str:
    return hashlib.blake2b(b"".join(t.numpy().tobytes() for t in tensors), digest_size=8).hexdigest()


root, mode, state_path, out = sys.argv[1:5]
dist.init_process_group("gloo")
rank = dist.get_rank()
with ImageNetLoader(root, "train", batch_size=GLOBAL_BATCH // dist.get_world_size(), image_size=32, device="cpu",
                    workers=1) as loader:
    if mode == "resume":
        loader.load_state_dict(json.loads(open(state_path).read()))
    digests, samples = [], []
    for epoch in range(EPOCH, EPOCH + 1):
        loader.set_epoch(epoch)
        for batch in loader.batches():
            digests.append(digest(batch.images, batch.labels))
            samples.append({str(key): digest(batch.images[i], batch.labels[i])
                            for i, key in enumerate(batch.key_hashes.tolist())})
            if mode == "stop" and len(digests) == int(sys.argv[5]):
                state = loader.state_dict()
                if rank == 0:  # the same on every rank: rank 0 saves it alone
                    open(state_path, "w").write(json.dumps(state))
                break
    with open(f"{out}.rank{rank}", "w") as f:
        f.write(json.dumps({"digests": digests, "samples": samples, "state": loader.state_dict()}))
dist.barrier()
dist.destroy_process_group()
