"""Plain, hedged and tied requests at equal offered load, on queueing replicas.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tied.py                  # 70 %, 30 s per mode
    .venv/bin/python benchmarks/bench_tied.py --utilisation 0.5 --name tied_u50

The comparison is ``hedgeclient demo --tied`` (``hedgeclient/cli/demo/_tied.py``
says how it is measured); this script runs it with the benchmark's settings, checks
the targets and writes ``benchmarks/results/<name>.json`` (default ``tied``) with the
command, the time and ``uptime``. Targets, per tie offset: p99 below the hedged and
the plain p99; extra server work <= 5 %; at most one drop message per tied pair.
"""

from __future__ import annotations

import argparse
import subprocess
import time

import anyio
from _common import command, machine, print_table, verdict, write_json

from hedgeclient.cli.demo._tied import TiedOptions, compare, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utilisation", type=float, default=0.7)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured per mode")
    parser.add_argument("--offsets", default="0.002,0.005", help="tie offsets, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--name", default="tied")
    args = parser.parse_args()
    options = TiedOptions(
        utilisation=args.utilisation, seconds=args.seconds, seed=args.seed,
        offsets=tuple(float(o) for o in args.offsets.split(",")),
    )  # fmt: skip
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results = anyio.run(compare, options, print)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    plain, hedged = results[0], results[1]
    targets = {}
    for tied in results[2:]:
        name = tied["mode"]
        best = tied["p99_s"] < min(hedged["p99_s"], plain["p99_s"])
        targets[f"{name}: p99 below hedged and plain"] = best
        targets[f"{name}: extra server work <= 5 %"] = tied["extra_server_work"] <= 0.05
        targets[f"{name}: <= 1 drop message per pair"] = tied["messages_per_pair"] <= 1.0
    headers, table = rows(results)
    print_table(f"utilisation {options.utilisation:.0%}", headers, table)
    for name, ok in targets.items():
        print(f"{verdict(ok)}  {name}")
    settings = {
        **{k: getattr(options, k) for k in TiedOptions.__dataclass_fields__},
        "capacity_per_s": options.capacity,
        "service_time": repr(options.law),
    }
    path = write_json(args.name, {
        "command": command(), "started": started, "uptime": uptime,
        "uptime_after": uptime_after, "machine": machine(), "settings": settings,
        "results": results, "targets": {k: verdict(v) for k, v in targets.items()},
    })  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
