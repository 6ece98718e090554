"""What a benchmark run reports: one record (a JSON line), a table, a plot."""

from __future__ import annotations

import platform
import time
from pathlib import Path

from shards.resources import available_cpus, pil_build


def summarise(data: dict | None, ceiling: tuple[str, float] | None, stats: dict, extra: dict) -> dict:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": available_cpus(),
              "pil": pil_build()[0], "image_stats": stats, **extra}
    if data:
        top = data["sweep"][-1]
        w = top["workers"]
        record |= {"workers": w, "images_per_sec": top["ours"], "baseline_images_per_sec": top["baseline"],
                   "speedup_vs_baseline": top["ours"] / top["baseline"],
                   "cold_images_per_sec": data["cold"]["ours"], "baseline_cold_images_per_sec": data["cold"]["baseline"],
                   "worker_rss_mb": top["ours_worker_rss_mb"], "baseline_worker_rss_mb": top["baseline_worker_rss_mb"],
                   "sweep": data["sweep"]}
        if "dali" in top:
            record |= {"dali_images_per_sec": top["dali"], "ratio_to_dali": top["ours"] / top["dali"]}
    if ceiling:
        record |= {"decoder": ceiling[0], "decode_ceiling_per_core": ceiling[1]}
        if data:
            record |= {"decode_ceiling_images_per_sec": ceiling[1] * record["workers"],
                       "ratio_to_ceiling": record["images_per_sec"] / (ceiling[1] * record["workers"])}
    return record


def table(record: dict) -> str:
    lines = [f"{'':28s}{'images/s':>12s}{'ratio':>10s}"]
    if "images_per_sec" in record:
        w = record["workers"]
        lines += [f"{'ours (' + str(w) + ' workers, warm)':28s}{record['images_per_sec']:12.0f}{1:10.2f}",
                  f"{'baseline ImageFolder':28s}{record['baseline_images_per_sec']:12.0f}"
                  f"{record['baseline_images_per_sec'] / record['images_per_sec']:10.2f}"]
        if "dali_images_per_sec" in record:
            lines.append(f"{'DALI CPU':28s}{record['dali_images_per_sec']:12.0f}"
                         f"{record['dali_images_per_sec'] / record['images_per_sec']:10.2f}")
        lines += [f"{'decode ceiling (' + str(w) + ' cores)':28s}{record['decode_ceiling_images_per_sec']:12.0f}"
                  f"{record['decode_ceiling_images_per_sec'] / record['images_per_sec']:10.2f}",
                  f"{'ours cold / baseline cold':28s}{record['cold_images_per_sec']:12.0f}"
                  f"{record['baseline_cold_images_per_sec']:>10.0f}",
                  f"ours {record['speedup_vs_baseline']:.2f}x the baseline, {record['ratio_to_ceiling']:.2f}x the "
                  f"decode ceiling ({record['decoder']})"
                  + (f", {record['ratio_to_dali']:.2f}x DALI" if "ratio_to_dali" in record else "")
                  + f"; worker RSS {record['worker_rss_mb']:.0f} MB (baseline {record['baseline_worker_rss_mb']:.0f} MB)"]
    labels = {"model_images_per_sec": f"model ({record['arch']})", "feed_images_per_sec": f"feed (--decode {record['decode']})",
              "full_images_per_sec": f"full ({record['arch']}, --decode {record['decode']})"}
    for key, label in labels.items():
        if key in record:
            lines.append(f"{label:28s}{record[key]:12.0f}")
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
    ax.plot(workers, [r["ours"] for r in sweep], "o-", label="ours")
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
