#!/usr/bin/env python3
"""The OpenTelemetry export measurement (BENCHMARKS.md, "OpenTelemetry export").

Runs `drover-bench` processing once per configuration in each round, in an order rotated
from round to round, and prints each configuration's median rate and its ratio to the `off`
configuration of the same binary: the ratio of the medians and the median of the rounds'
ratios. Start `drover-bench otlp-sink &` first; its `/stats` are printed at the end.

    python3 bench/otel-rounds.py --jobs 200000 --rounds 20 \\
        after-on=target/release/drover-bench:on after-off=target/release/drover-bench:off

A configuration is LABEL=BINARY:MODE, the label ending in `-MODE`; modes:
  off        no export
  on         export to http://127.0.0.1:4318
  deferred   export on, but queued until the run ends (OTEL_BSP_* set very large)
  unsampled  export on with the sampler always_off (spans made, none recorded)
"""

import argparse
import os
import re
import statistics
import subprocess
import urllib.request

ENDPOINT = "http://127.0.0.1:4318"
MODES = {
    "off": {},
    "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT},
    "deferred": {
        "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_BSP_MAX_QUEUE_SIZE": "4000000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4000000",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    },
    "unsampled": {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_SAMPLER": "always_off"},
}
RATE = re.compile(r"^postgres\s+process_1w.*?\s([\d,]+)\s+-\s+1\s*$", re.M)


def run(binary, mode, jobs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.setdefault("DROVER_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/drover_bench")
    env.update(MODES[mode])
    out = subprocess.run(
        [binary, "--store", "postgres", "--workload", "process", "--jobs", str(jobs), "--reps", "1",
         "--workers", "1", "--slots", "32", "--worker-mode", "in-process"],
        env=env, capture_output=True, text=True, check=False)
    found = RATE.search(out.stdout)
    if not found:
        raise SystemExit(f"no process rate from {binary} ({mode}):\n{out.stdout}\n{out.stderr}")
    return int(found.group(1).replace(",", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("configs", nargs="+", metavar="LABEL=BINARY:MODE")
    args = parser.parse_args()
    configs = []
    for config in args.configs:
        label, rest = config.split("=", 1)
        binary, mode = rest.rsplit(":", 1)
        if mode not in MODES or not label.endswith("-" + mode):
            raise SystemExit(f"{config}: the mode must be one of {list(MODES)} and end the label")
        configs.append((label, binary, mode))
    rates = {label: [] for label, _, _ in configs}
    for r in range(args.rounds):
        shift = r % len(configs)
        for label, binary, mode in configs[shift:] + configs[:shift]:
            rates[label].append(run(binary, mode, args.jobs))
            print(f"round {r + 1}: {label} {rates[label][-1]:,} jobs/s", flush=True)
    try:
        print("receiver:", urllib.request.urlopen(ENDPOINT + "/stats", timeout=5).read().decode())
    except OSError as error:
        print("receiver: no /stats:", error)
    for label, values in rates.items():
        line = f"{label}: median {statistics.median(values):,.0f} jobs/s"
        off = label.rsplit("-", 1)[0] + "-off"
        if label != off and off in rates:
            ratios = [a / b for a, b in zip(values, rates[off])]
            line += (f", / off: medians {statistics.median(values) / statistics.median(rates[off]):.3f},"
                     f" median of the rounds' ratios {statistics.median(ratios):.3f}")
        print(line)


if __name__ == "__main__":
    main()
