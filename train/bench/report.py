"""What a benchmark run reports: one record (a JSON line), a table, a plot."""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path

from shards.resources import available_cpus, pil_build


def summarise(data: dict | None, stats: dict, extra: dict) -> dict:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpu": cpu_model(),
              "cpus": available_cpus(), "pil": pil_build()[0], "image_stats": stats, **extra}
    if data:
        rows = rows_by_workers(data["sweep"])
        w = max(rows)
        top = median_row(rows[w])
        ratios = ratios_of(rows[w])
        record |= {"workers": w, "rounds": len(rows[w]), "images_per_sec": top["ours"],
                   "library_images_per_sec": top["library"], "normalise_ms_per_image": top["normalise_ms_per_image"],
                   "pil_images_per_sec": top["pil"], "baseline_images_per_sec": top["baseline"],
                   "speedup_vs_baseline": ratios["ours_vs_baseline"]["median"],
                   "speedup_vs_pil": ratios["ours_vs_pil"]["median"], "cold_images_per_sec": data["cold"]["ours"],
                   "baseline_cold_images_per_sec": data["cold"]["baseline"], "memory_mb": top["ours_memory_mb"],
                   "pil_worker_rss_mb": top["pil_worker_rss_mb"], "baseline_worker_rss_mb": top["baseline_worker_rss_mb"],
                   "decoder": top["ceiling_decoder"], "decode_ceiling_per_core": top["ceiling_per_core"],
                   "decode_ceiling_images_per_sec": top["ceiling_per_core"] * w,
                   "ratio_to_ceiling": ratios["per_core_vs_fastest_decode"]["median"],
                   "per_core_ratio_to_ceiling": {n: ratios_of(r)["per_core_vs_fastest_decode"]["median"]
                                                 for n, r in sorted(rows.items())},
                   "ratios": ratios, "ratios_by_workers": {n: ratios_of(r) for n, r in sorted(rows.items())},
                   "sweep": data["sweep"]}
        if "dali" in top:
            record |= {"dali_images_per_sec": top["dali"], "ratio_to_dali": ratios["ours_vs_dali"]["median"]}
        if "ours_on_peers" in top:
            record["ours_on_peers_images_per_sec"] = top["ours_on_peers"]
    return record


# Each ratio of the summary: (name, numerator, denominator) of a round's row at one worker count. Ours (the Loader)
# hands over uint8 batches, as DALI and the PIL path do, and leaves the normalisation to the device; the baseline
# ends in ToTensor and Normalize, float32 batches four times the bytes (about 30% of its CPU an image on the demo's
# images): library_vs_baseline is the like-for-like ratio, the ImageNetLoader's normalised float32 batches on the CPU.
RATIOS = (("ours_vs_baseline", "ours", "baseline"), ("ours_vs_dali", "ours", "dali"), ("ours_vs_pil", "ours", "pil"),
          ("per_core_vs_fastest_decode", "ours", "ceiling"), ("ours_vs_ours_on_peers", "ours", "ours_on_peers"),
          ("library_vs_ours", "library", "ours"), ("library_vs_baseline", "library", "baseline"))


def rows_by_workers(sweep: list[dict]) -> dict[int, list[dict]]:
    """The data mode's rows (one per round and worker count), grouped by worker count."""
    rows: dict[int, list[dict]] = {}
    for row in sweep:
        rows.setdefault(row["workers"], []).append(row)
    return rows


def median_row(rows: list[dict]) -> dict:
    """The rounds' rows at one worker count as one: each number the median of the rounds that have it."""
    keys = dict.fromkeys(key for row in rows for key in row)
    merged = {}
    for key in keys:
        values = [row[key] for row in rows if key in row]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        merged[key] = statistics.median(values) if numeric else values[0]
    return merged


def round_value(row: dict, key: str) -> float:
    """A row's images/s of `key`; "ceiling" is the fastest full decode in as many threads as ours."""
    return row["ceiling_per_core"] * row["workers"] if key == "ceiling" else row[key]


def ratios_of(rows: list[dict]) -> dict[str, dict]:
    """Each ratio the rows (the rounds at one worker count) can give: its value in each round, each
    taken within one round so that it sees one speed of the machine, and their median."""
    ratios = {}
    for name, numerator, denominator in RATIOS:
        rounds = [round_value(r, numerator) / round_value(r, denominator) for r in rows
                  if numerator in r and (denominator in r or denominator == "ceiling")]
        if rounds:
            ratios[name] = {"median": statistics.median(rounds), "rounds": rounds}
    return ratios


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
                  f"ours {record['speedup_vs_baseline']:.2f}x the baseline (uint8 against its normalised float32; "
                  f"the ImageNetLoader, normalised as it: {record['ratios']['library_vs_baseline']['median']:.2f}x), "
                  f"{record['speedup_vs_pil']:.2f}x the PIL "
                  f"path" + (f", {record['ratio_to_dali']:.2f}x DALI" if "ratio_to_dali" in record else "")
                  + "; per core, the fastest full decode's ("
                  + ", ".join(f"{n} threads: {r:.2f}x" for n, r in record["per_core_ratio_to_ceiling"].items())
                  + f"; {record['decoder']})",
                  f"ImageNetLoader: ours plus the normalisation on the CPU device, "
                  f"{record['normalise_ms_per_image']:.3f} ms an image apart (a GPU device does it there)",
                  f"memory: ours {record['memory_mb']:.0f} MB (batch buffers and sample table, no worker processes); "
                  f"worker RSS: PIL path {record['pil_worker_rss_mb']:.0f} MB, baseline "
                  f"{record['baseline_worker_rss_mb']:.0f} MB each"]
    if "ratios" in record:
        lines += ratio_summary(record)
    labels = {"model_images_per_sec": f"model ({record['arch']})", "feed_images_per_sec": f"feed (--decode {record['decode']})",
              "full_images_per_sec": f"full ({record['arch']}, --decode {record['decode']})"}
    for key, label in labels.items():
        if key in record:
            lines.append(f"{label:34s}{record[key]:10.0f}")
    if "full_images_per_sec" in record and "model_images_per_sec" in record:
        lines.append(f"full / model = {record['full_images_per_sec'] / record['model_images_per_sec']:.2f}")
    return "\n".join(lines)


def ratio_summary(record: dict) -> list[str]:
    """The loader's figures of BENCHMARKS.md's table in one block: each ratio's median over the
    interleaved rounds, then each round's, at the largest worker count (per core: at each)."""
    ratios, w = record["ratios"], record["workers"]

    def line(label: str, entry: dict) -> str:
        return f"  {label:66s}{entry['median']:6.2f}x  [{' '.join(f'{v:.2f}' for v in entry['rounds'])}]"

    lines = [f"ratios at {w} threads, medians of {record['rounds']} interleaved rounds [each round's]; "
             f"{record['cpu']}, {record['cpus']} CPUs; {peers_line(record)}:",
             line("ours (uint8) / the ImageFolder baseline (normalised float32)", ratios["ours_vs_baseline"]),
             line("ImageNetLoader / the ImageFolder baseline, both normalised float32", ratios["library_vs_baseline"])]
    if "ours_vs_dali" in ratios:
        lines.append(line("ours / DALI's CPU pipeline", ratios["ours_vs_dali"]))
    for n, by_count in record["ratios_by_workers"].items():
        n = int(n)  # a key of JSON's, read back, is a string
        lines.append(line(f"ours per core / the fastest full decode's ({record['decoder']}), {n} thread{'s' * (n > 1)}",
                          by_count["per_core_vs_fastest_decode"]))
    if "ours_vs_ours_on_peers" in ratios:
        lines.append(line(f"ours, {shards_kind(record, 'data')} / {shards_kind(record, 'baseline')} shards",
                          ratios["ours_vs_ours_on_peers"]))
    lines.append(line("ImageNetLoader (CPU device, normalised) / ours (the Loader)", ratios["library_vs_ours"]))
    return lines


def peers_line(record: dict) -> str:
    """Which images the peers (the baseline, DALI, the fastest full decode) read: the ratios to them hold for the
    original JPEGs only where those are plain shards. Seekable shards' restart markers cost DALI's and the full
    decoders' libjpeg-turbo about 4% and 10% more a decode (their slow Huffman path; not ours, nor pillow-simd on
    the patched library): on them those two ratios read that much too high."""
    if record.get("baseline_restart_mcus"):
        return ("the peers on seekable shards, not the original JPEGs (their restart markers slow DALI's and the full "
                "decoders' libjpeg-turbo: give --baseline-data the same source prepared with --restart-mcus 0)")
    return f"the peers on {shards_kind(record, 'baseline')} shards"


def shards_kind(record: dict, which: str) -> str:
    """"seekable" or "plain" (prepare's --restart-mcus 0) for --data or --baseline-data, else the option."""
    restarts = record.get(f"{which}_restart_mcus")
    if restarts is None:
        return f"--{which.replace('baseline', 'baseline-data')}"
    return "seekable" if restarts else "plain"


def figure(record: dict):
    """Images/s against worker count: a point per loader and count, and the decode ceiling as a
    line through the origin (visible with one worker count too); integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    sweep = [median_row(rows) for _, rows in sorted(rows_by_workers(record["sweep"]).items())]
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
