"""What a benchmark run reports: one record (a JSON line), a table, a plot."""

from __future__ import annotations

import platform
import time
from pathlib import Path

from shards.resources import available_cpus, pil_build


def summarise(data: dict | None, stats: dict, extra: dict) -> dict:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpu": cpu_model(),
              "cpus": available_cpus(), "pil": pil_build()[0], "image_stats": stats, **extra}
    if data:
        top = data["sweep"][-1]
        w = top["workers"]
        record |= {"workers": w, "images_per_sec": top["ours"], "library_images_per_sec": top["library"],
                   "normalise_ms_per_image": top["normalise_ms_per_image"], "pil_images_per_sec": top["pil"],
                   "baseline_images_per_sec": top["baseline"], "speedup_vs_baseline": top["ours"] / top["baseline"],
                   "speedup_vs_pil": top["ours"] / top["pil"], "cold_images_per_sec": data["cold"]["ours"],
                   "baseline_cold_images_per_sec": data["cold"]["baseline"], "memory_mb": top["ours_memory_mb"],
                   "pil_worker_rss_mb": top["pil_worker_rss_mb"], "baseline_worker_rss_mb": top["baseline_worker_rss_mb"],
                   "decoder": top["ceiling_decoder"], "decode_ceiling_per_core": top["ceiling_per_core"],
                   "decode_ceiling_images_per_sec": top["ceiling_per_core"] * w,
                   "ratio_to_ceiling": top["ours"] / w / top["ceiling_per_core"],
                   "per_core_ratio_to_ceiling": {r["workers"]: r["ours"] / r["workers"] / r["ceiling_per_core"]
                                                 for r in data["sweep"]},
                   "sweep": data["sweep"]}
        if "dali" in top:
            record |= {"dali_images_per_sec": top["dali"], "ratio_to_dali": top["ours"] / top["dali"]}
    return record


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def table(record: dict) -> str:
    lines = [f"{'':34s}{'images/s':>10s}{'ours is':>10s}"]
    if "images_per_sec" in record:
        w, ours = record["workers"], record["images_per_sec"]
        rows = [(f"ours ({w} threads, warm)", ours), ("ImageNetLoader (ours, normalised)", record["library_images_per_sec"]),
                (f"today's PIL path ({w} workers)", record["pil_images_per_sec"]),
                (f"baseline ImageFolder ({w} workers)", record["baseline_images_per_sec"])]
        if "dali_images_per_sec" in record:
            rows.append((f"DALI CPU ({w} threads)", record["dali_images_per_sec"]))
        rows.append((f"decode ceiling ({w} cores)", record["decode_ceiling_images_per_sec"]))
        lines += [f"{name:34s}{rate:10.0f}{ours / rate:9.2f}x" for name, rate in rows]
        lines += [f"{'ours cold / baseline cold':34s}{record['cold_images_per_sec']:10.0f}"
                  f"{record['baseline_cold_images_per_sec']:10.0f}",
                  f"ours {record['speedup_vs_baseline']:.2f}x the baseline, {record['speedup_vs_pil']:.2f}x the PIL "
                  f"path" + (f", {record['ratio_to_dali']:.2f}x DALI" if "ratio_to_dali" in record else "")
                  + "; per core, the fastest full decode's ("
                  + ", ".join(f"{n} threads: {r:.2f}x" for n, r in record["per_core_ratio_to_ceiling"].items())
                  + f"; {record['decoder']})",
                  f"ImageNetLoader: ours plus the normalisation on the CPU device, "
                  f"{record['normalise_ms_per_image']:.3f} ms an image apart (a GPU device does it there)",
                  f"memory: ours {record['memory_mb']:.0f} MB (batch buffers and sample table, no worker processes); "
                  f"worker RSS: PIL path {record['pil_worker_rss_mb']:.0f} MB, baseline "
                  f"{record['baseline_worker_rss_mb']:.0f} MB each"]
    labels = {"model_images_per_sec": f"model ({record['arch']})", "feed_images_per_sec": f"feed (--decode {record['decode']})",
              "full_images_per_sec": f"full ({record['arch']}, --decode {record['decode']})"}
    for key, label in labels.items():
        if key in record:
            lines.append(f"{label:34s}{record[key]:10.0f}")
    if "full_images_per_sec" in record and "model_images_per_sec" in record:
        lines.append(f"full / model = {record['full_images_per_sec'] / record['model_images_per_sec']:.2f}")
    return "\n".join(lines)


def figure(record: dict):
    """Images/s against worker count: a point per loader and count, and the decode ceiling as a
    line through the origin (visible with one worker count too); integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    sweep = record["sweep"]
    workers = [r["workers"] for r in sweep]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(workers, [r["ours"] for r in sweep], "o-", label="ours (threads)")
    if all("pil" in r for r in sweep):
        ax.plot(workers, [r["pil"] for r in sweep], "o-", label="today's PIL path")
    ax.plot(workers, [r["baseline"] for r in sweep], "o-", label="ImageFolder baseline")
    if all("dali" in r for r in sweep):
        ax.plot(workers, [r["dali"] for r in sweep], "o-", label="DALI CPU")
    top = max(workers)
    ax.plot([0, top], [0, record["decode_ceiling_per_core"] * top], "k--",
            label=f"decode ceiling ({record['decoder']})")
    ax.set_xlim(0, top + 0.5)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="loader workers (processes or threads)", ylabel="images/s", title="data loader throughput")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot(record: dict, out: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(record)
    fig.savefig(out, dpi=100)
    plt.close(fig)
