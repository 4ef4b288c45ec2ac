#!/usr/bin/env python3
"""Draws the benchmark suite's results as PNG plots.

Usage: plot-bench.py RESULTS_JSON OUT_DIR

Reads the results.json written by `cargo bench --bench suite` and writes into OUT_DIR:

  throughput.png  appends/s against the number of producers, one subplot per record size,
                  one line per partition count, with raw SQLite and Redis as reference lines
  latency.png     p50 / p99 / p999 latency in ms at a fixed offered rate, one group per workload
  scale.png       append and read rates and private resident memory against the records already stored
  million.png     new partitions/s in each tenth of the million-partitions run against the partitions
                  written, with the smaller runs under two partitions.max_open values
  replication.png records/s of 100-record and single-record POSTs with replication to a bucket
                  ("s3", local and +25 ms per call) next to the local disk alone ("none"), with the
                  p50 ack latency of each

A section that is missing or empty in the JSON is skipped with a note; the other plots are
still drawn. Needs matplotlib only (Agg backend, no display).
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

FIGSIZE = (8, 4.5)
DPI = 120


def note(message):
    print(f"plot-bench: {message}", file=sys.stderr)


def size_label(size):
    """100 -> '100 B', 1024 -> '1 KiB', 1048576 -> '1 MiB'."""
    size = int(size)
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def si(value, _position=None):
    """A compact number for axis ticks and labels: 1500 -> '1.5k', 2000000 -> '2M'."""
    for suffix, factor in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def entries_with(results, section, keys):
    """The entries of a list section that have every one of keys; [] when the section is absent."""
    entries = results.get(section) or []
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict) and all(e.get(k) is not None for k in keys)]


def save(fig, out_dir, name):
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"wrote {path}")


# throughput.png


def reference_lines(results, size):
    """(label, appends/s) of the horizontal reference lines for one record size."""
    lines = []
    ceiling = (results.get("ceiling") or {}).get(str(size))
    if ceiling is not None:
        lines.append(("raw SQLite, 100-row transactions", ceiling))
    unpipelined = ((results.get("redis") or {}).get(str(size)) or {}).get("unpipelined")
    if unpipelined is not None:
        lines.append(("Redis XADD always, 50 clients", unpipelined))
    return lines


def draw_throughput_axis(ax, results, entries, size):
    producers = sorted({e["producers"] for e in entries})
    for partitions in sorted({e["partitions"] for e in entries}):
        mine = [e for e in entries if e["partitions"] == partitions]
        points = sorted((e["producers"], e["rate"]) for e in mine)
        label = f"{partitions} partition" + ("" if partitions == 1 else "s")
        ax.plot([p for p, _ in points], [r for _, r in points], marker="o", label=label)
    for (label, rate), color in zip(reference_lines(results, size), ("tab:gray", "tab:red")):
        ax.axhline(rate, linestyle="--", color=color, label=label)

    ax.set_xscale("log")
    ax.set_xticks(producers)
    ax.set_xticklabels([str(p) for p in producers])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set_ylim(bottom=0)
    ax.set_title(f"{size_label(size)} records")
    ax.set_xlabel("producers (concurrent appenders)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")


def plot_throughput(results, out_dir):
    entries = entries_with(results, "embedded", ("size", "partitions", "producers", "rate"))
    if not entries:
        note("no 'embedded' results: skipping throughput.png")
        return
    sizes = sorted({e["size"] for e in entries})
    fig, axes = plt.subplots(1, len(sizes), figsize=FIGSIZE, squeeze=False)
    for ax, size in zip(axes[0], sizes):
        draw_throughput_axis(ax, results, [e for e in entries if e["size"] == size], size)
    axes[0][0].set_ylabel("durable appends/s")
    title = "Durable append throughput against concurrency"
    seconds = results.get("seconds")
    if isinstance(seconds, (int, float)):
        title += f" ({seconds:g} s per point)"
    fig.suptitle(title)
    save(fig, out_dir, "throughput.png")


# latency.png

PERCENTILES = (("p50", "p50_ms"), ("p99", "p99_ms"), ("p999", "p999_ms"))


def ms_label(value):
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


def plot_latency(results, out_dir):
    entries = entries_with(results, "latency", ("name",))
    entries = [e for e in entries if any(e.get(key) is not None for _, key in PERCENTILES)]
    if not entries:
        note("no 'latency' results: skipping latency.png")
        return
    fig, ax = plt.subplots(figsize=FIGSIZE)
    width = 0.8 / len(PERCENTILES)
    for i, (label, key) in enumerate(PERCENTILES):
        xs = [g + (i - (len(PERCENTILES) - 1) / 2) * width for g in range(len(entries))]
        points = [(x, e[key]) for x, e in zip(xs, entries) if e.get(key) is not None and e[key] > 0]
        if not points:
            continue
        bars = ax.bar([x for x, _ in points], [v for _, v in points], width, label=label)
        ax.bar_label(bars, labels=[ms_label(v) for _, v in points], fontsize="x-small", padding=2)

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
    ax.margins(y=0.15)
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels([group_label(e) for e in entries], fontsize="small")
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_title("Append latency at a fixed offered rate")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    save(fig, out_dir, "latency.png")


def group_label(entry):
    rate = entry.get("rate")
    if rate is None:
        return entry["name"]
    return f"{entry['name']}\n({si(rate)} offered/s)"


# scale.png


def plot_scale(results, out_dir):
    entries = entries_with(results, "scale", ("records",))
    entries = sorted((e for e in entries if e["records"] > 0), key=lambda e: e["records"])
    if not entries:
        note("no 'scale' results: skipping scale.png")
        return
    records = [e["records"] for e in entries]
    fig, rates = plt.subplots(figsize=FIGSIZE)
    handles = []
    for key, label, color in (
        ("append_rate", "appends/s", "tab:blue"),
        ("read_rate", "reads/s", "tab:green"),
    ):
        points = [(e["records"], e[key]) for e in entries if e.get(key) is not None]
        if points:
            handles += rates.plot(*zip(*points), marker="o", color=color, label=label)
    rates.set_xscale("log")
    rates.set_yscale("log")
    rates.xaxis.set_major_formatter(FuncFormatter(si))
    rates.yaxis.set_major_formatter(FuncFormatter(si))
    rates.yaxis.set_minor_formatter(FuncFormatter(si))
    rates.tick_params(axis="y", which="minor", labelsize="x-small")
    rates.set_xlabel("records already in the partition (log scale)")
    rates.set_ylabel("records/s (log scale)")
    rates.grid(True, which="major", alpha=0.3)

    memory = rates.twinx()
    points = [(e["records"], e["rss_mib"]) for e in entries if e.get("rss_mib") is not None]
    if points:
        handles += memory.plot(*zip(*points), marker="s", linestyle=":", color="tab:orange",
                               label="private resident memory (MiB)")
        memory.set_ylim(bottom=0, top=max(v for _, v in points) * 1.2)
    memory.set_ylabel("private resident memory (MiB)")

    rates.set_title(
        f"Throughput and memory as the partition grows (records up to {si(max(records))})"
    )
    rates.legend(handles=handles, loc="best", fontsize="small")
    save(fig, out_dir, "scale.png")


# million.png


def block_points(writes):
    """(partitions written, new partitions/s) of each block of a 'writes' entry."""
    blocks = entries_with(writes if isinstance(writes, dict) else {}, "blocks", ("partitions", "rate"))
    return sorted((b["partitions"], b["rate"]) for b in blocks)


def plot_million(results, out_dir):
    million = results.get("million")
    points = block_points((million or {}).get("writes"))
    if not points:
        note("no 'million' results: skipping million.png")
        return
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.plot(*zip(*points), marker="o", label="default max_open")
    for run in entries_with(million, "max_open", ("max_open",)):
        mine = block_points(run.get("writes"))
        if mine:
            ax.plot(*zip(*mine), marker=".", linestyle="--", label=f"max_open = {si(run['max_open'])}")
    ax.xaxis.set_major_formatter(FuncFormatter(si))
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("partitions written (one new topic each)")
    ax.set_ylabel("new partitions/s in the block")
    clients = million.get("clients")
    limit = million.get("open_files_limit")
    detail = ", ".join(
        text for text in (
            f"{clients} HTTP clients" if clients else None,
            f"open-file limit {limit}" if limit else None,
        ) if text
    )
    ax.set_title(f"First writes as partitions pile up ({si(points[-1][0])}{', ' + detail if detail else ''})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    save(fig, out_dir, "million.png")


# replication.png


def plot_replication(results, out_dir):
    modes = entries_with(results.get("replication") or {}, "modes", ("name", "batches", "single"))
    if not modes:
        note("no 'replication' results: skipping replication.png")
        return
    fig, axes = plt.subplots(1, 2, figsize=(FIGSIZE[0] * 1.4, FIGSIZE[1]))
    for ax, load, title in (
        (axes[0], "batches", "100-record POSTs, 16 connections"),
        (axes[1], "single", "single-record POSTs, 50 connections"),
    ):
        names = [m["name"] for m in modes]
        rates = [m[load]["rate"] for m in modes]
        bars = ax.bar(range(len(modes)), rates, color=["#888888", "#3b75af", "#aec7e8"][: len(modes)])
        for bar, m in zip(bars, modes):
            ax.annotate(
                f"p50 {m[load]['p50_ms']:.1f} ms",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center", va="bottom", fontsize="small",
            )
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels([n.replace(", ", "\n") for n in names], fontsize="small")
        ax.yaxis.set_major_formatter(FuncFormatter(si))
        ax.set_ylabel("records/s")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Every write in the bucket before its answer, next to the local disk alone")
    save(fig, out_dir, "replication.png")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    results_path, out_dir = argv[1], argv[2]
    with open(results_path, encoding="utf-8") as f:
        results = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    for plot in (plot_throughput, plot_latency, plot_scale, plot_million, plot_replication):
        try:
            plot(results, out_dir)
        except Exception as error:  # one bad section must not cost the other plots
            plt.close("all")
            note(f"{plot.__name__} failed ({type(error).__name__}: {error}): skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
