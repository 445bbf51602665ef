#!/usr/bin/env python3
"""Writes vidur-allreduce-dgx.csv from microsoft/vidur's measured all-reduce
profiles (data/profiling/network/{a100,h100}_dgx/all_reduce.csv): the rows
whose workers are all in one node (num_workers == devices_per_node: 2, 4 or
8 GPUs over NVLink/NVSwitch), the median of the repeats, in ms, per message
size in bytes (vidur's `size` column is bytes: its collectives_wrapper writes
`"size": self._size * 2` for fp16 elements).

  python3 extract_vidur_allreduce.py VIDUR_GIT_DIR [COMMIT] > vidur-allreduce-dgx.csv
"""
import csv, io, subprocess, sys

git, commit = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "7d47513363ec447a741ac5e47241580b47724fbf"
w = csv.writer(sys.stdout, lineterminator="\n")
w.writerow(["gpu", "num_workers", "size_bytes", "median_ms"])
for gpu in ("a100", "h100"):
    text = subprocess.run(["git", "--git-dir", git, "show",
                           f"{commit}:data/profiling/network/{gpu}_dgx/all_reduce.csv"],
                          check=True, capture_output=True, text=True).stdout
    rows = [r for r in csv.DictReader(io.StringIO(text)) if r["num_workers"] == r["devices_per_node"]]
    rows.sort(key=lambda r: (int(r["num_workers"]), int(r["size"])))
    for r in rows:
        w.writerow([gpu, r["num_workers"], r["size"], r["time_stats.all_reduce.median"]])
