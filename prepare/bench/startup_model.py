#!/usr/bin/env python3
"""Model of one job start of `python -m prepare` on N nodes: every node reading the whole source
(`--no-shared-read`) against the shared read (the default under srun on several nodes). Plain
Python 3, no dependencies; prints the markdown tables of its section in docs/benchmarks-history.md. Every parameter is
in PARAMS; change one and rerun.

Units: GB = 1e9 bytes, GB/s, seconds. Times are printed in minutes.

Stages and overlap (as prepare and its shared read are built):
  phase 1, overlapped in the workers: read the source parts, check / rewrite, (shared read: send
           the processed samples to the other nodes and receive theirs), spill every sample to
           local disk. Its time is the max of its stages.
  phase 2, after phase 1: read the spill back, write the shards (tar, SHA-256), fsync.
           Its time is the max of the shard write and its CPU.
  total = phase 1 + phase 2. (Fully overlapped lower bound: max of all stages.)
"""

PARAMS = dict(
    cores=16,            # cores per node (sensitivity: 64)
    c_share=1.1e-3,      # s of CPU per image that only the node reading it pays:
                         #   1.0 ms restart-marker rewrite + header checks, + 0.1 ms reading/parsing
    c_all=0.2e-3,        # s of CPU per image that every node pays for every image it writes:
                         #   spill pickling, tar writing, SHA-256 (1.0 + 0.1 + 0.2 = 1.3 ms in all)
    growth=1.025,        # processed dataset / source bytes (restart markers: +2.5%)
    fs_client=3.0,       # GB/s one node can read from the shared FS (a few GB/s per client)
    fs_aggregate=100.0,  # GB/s aggregate of the shared FS
    fs_share=0.5,        # fraction of the aggregate this job gets (other users' load)
    net=5.0,             # GB/s per node per direction that gloo over TCP reaches (full duplex)
    disk=2.0,            # GB/s sustained fsynced write to the node-local NVMe
)

DATASETS = {
    "ImageNet-1k": dict(source=147.0, images=1.28e6),
    "ImageNet-21k": dict(source=1300.0, images=13.0e6),
}

NODES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def fs_rate(n, p):
    """GB/s each node reads when n nodes read the shared FS at once."""
    return min(p["fs_client"], p["fs_aggregate"] * p["fs_share"] / n)


def today(n, d, p):
    size, images = d["source"], d["images"]
    dataset = size * p["growth"]
    st = dict(read=size / fs_rate(n, p),
              cpu=images * p["c_share"] / p["cores"],
              disk=dataset / p["disk"])          # the spill, in phase 1
    phase2 = max(dataset / p["disk"], images * p["c_all"] / p["cores"])
    bound = max(st, key=st.get)
    return dict(st, total=max(st.values()) + phase2, bound=bound, fs_bytes=n * size)


def shared(n, d, p):
    size, images = d["source"], d["images"]
    dataset = size * p["growth"]
    st = dict(read=(size / n) / fs_rate(n, p),
              cpu=(images / n) * p["c_share"] / p["cores"],
              net=(n - 1) / n * dataset / p["net"],  # sent and received at once
              disk=dataset / p["disk"])             # every node spills the whole dataset
    phase2 = max(dataset / p["disk"], images * p["c_all"] / p["cores"])
    bound = max(st, key=st.get)
    return dict(st, total=max(st.values()) + phase2, bound=bound, fs_bytes=size)


def fmt(seconds):
    m = seconds / 60
    return f"{m:.2f}" if m < 1 else f"{m:.1f}"


def table(name, d, p):
    p64 = dict(p, cores=64)
    dataset = d["source"] * p["growth"]
    print(f"#### {name}: {d['source']:.0f} GB of source, {d['images'] / 1e6:.2f} M images, "
          f"{dataset:.0f} GB written twice per node (times in minutes)\n")
    print("| N | TB read from the FS, today | today: read | today: CPU | **today: total** (bound) "
          "| shared: read | shared: CPU | shared: net | **shared: total** (bound) | **speed-up** "
          "| 64 cores: today / shared (speed-up) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in NODES:
        t, s = today(n, d, p), shared(n, d, p)
        t64, s64 = today(n, d, p64), shared(n, d, p64)
        print(f"| {n} | {t['fs_bytes'] / 1000:.2f} | {fmt(t['read'])} | {fmt(t['cpu'])} "
              f"| **{fmt(t['total'])}** ({t['bound']}) | {fmt(s['read'])} | {fmt(s['cpu'])} "
              f"| {fmt(s['net'])} | **{fmt(s['total'])}** ({s['bound']}) | **{t['total'] / s['total']:.2f}x** "
              f"| {fmt(t64['total'])} / {fmt(s64['total'])} ({t64['total'] / s64['total']:.2f}x) |")
    disk = dataset / p["disk"]
    print(f"\nLocal disk, both designs and every N: spill {fmt(disk)} + shards {fmt(disk)} min. "
          f"The shared read reads {d['source'] / 1000:.2f} TB from the FS for any N.\n")


def crossover(d, p, ratio, top=100000):
    """The smallest N from which the shared read stays at least `ratio` times faster (up to `top`)."""
    n = top
    while n > 1 and today(n, d, p)["total"] >= ratio * shared(n, d, p)["total"]:
        n -= 1
    return n + 1 if n < top else None


def sensitivity(p):
    scenarios = [
        ("defaults (above)", {}),
        ("64 cores per node", dict(cores=64)),
        ("gloo at 1 GB/s per node (one TCP stream, gloo#248)", dict(net=1.0)),
        ("network at HDR100 line rate, 12.5 GB/s", dict(net=12.5)),
        ("Cedar-like FS: 35 GB/s aggregate, half of it ours", dict(fs_aggregate=35.0)),
        ("Perlmutter-like FS: 5 TB/s aggregate, half of it ours", dict(fs_aggregate=5000.0)),
        ("client read 10 GB/s (HDR100/HDR200 Lustre client)", dict(fs_client=10.0)),
        ("local NVMe writes 3.5 GB/s (U.2 PM9A3)", dict(disk=3.5)),
    ]
    print("#### Sensitivity: speed-up of the shared read (today's total / shared total)\n")
    print("| scenario | 1k: N=4 | N=16 | N=64 | N=256 | 1k: ahead (> 1.01x) / >= 1.5x from N = "
          "| 21k: N=4 | N=16 | N=64 | N=256 | 21k: shared total at N=64, min |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    k1, k21 = DATASETS["ImageNet-1k"], DATASETS["ImageNet-21k"]
    for label, change in scenarios:
        q = dict(p, **change)
        r = lambda d, n: today(n, d, q)["total"] / shared(n, d, q)["total"]
        x, w = crossover(k1, q, 1.5), crossover(k1, q, 1.01)
        print(f"| {label} | " + " | ".join(f"{r(k1, n):.2f}x" for n in (4, 16, 64, 256))
              + f" | {w if w <= 256 else f'> 256 ({w})'} / {x if x <= 256 else f'> 256 ({x})'} | " + " | ".join(f"{r(k21, n):.2f}x" for n in (4, 16, 64, 256))
              + f" | {fmt(shared(64, k21, q)['total'])} |")
    print()


def bounds_notes(p):
    """When the network or the local disk bounds the shared read."""
    print("#### Where the bounds fall (defaults)\n")
    avail = p["fs_aggregate"] * p["fs_share"]
    print(f"- Today's read leaves the client limit for the FS aggregate above N = "
          f"{avail / p['fs_client']:.1f} ({avail:.0f} GB/s / {p['fs_client']:.0f} GB/s).")
    print(f"- Shared read: the exchange, (N-1)/N x D / net, outlasts the spill, D / disk, only if "
          f"net < (N-1)/N x disk, i.e. below {p['disk']:.1f} GB/s at large N; at {p['net']:.0f} GB/s it never binds.")
    for name, d in DATASETS.items():
        lim = d["images"] * p["c_share"] / p["cores"] / (d["source"] * p["growth"] / p["disk"])
        print(f"- {name}: the shared read's CPU falls under the spill time from N = {max(1, -(-lim // 1)):.0f} "
              f"(16 cores); from there it is local-disk bound.")
    print()


if __name__ == "__main__":
    for name, d in DATASETS.items():
        table(name, d, PARAMS)
    sensitivity(PARAMS)
    bounds_notes(PARAMS)
