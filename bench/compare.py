#!/usr/bin/env python3
"""Set Drover's figures beside its peers' (BENCHMARKS.md) and print one table.

    python3 bench/compare.py PEERS_JSONL DROVER_JSON [DROVER_JSON ...] [--clients 8]

PEERS_JSONL: the results file of the peers' run-all.sh (one JSON line per measurement, with
"peer", "config", and enqueue_per_s / process_per_s / p50_ms ... fields). DROVER_JSON: the file
drover-bench writes (its "summary" holds medians per store and scenario). Given several (compare.sh
measures Drover before the peers and again after them), Drover's figures are medians over the
repetitions of all of them, taken the way drover-bench takes its own (each latency percentile:
the median of the repetitions' values), and the medians of each file are printed too. Peer
figures are medians over their repetitions, like the peers' summarize.py. Throughput ratios are
Drover / best peer (higher is better); latency ratios are Drover / best peer (lower is better).
Targets are those of BENCHMARKS.md ("What is measured"); "met" compares the median only, so read noisy runs with care.
"""
import argparse
import json
import os
import re
import statistics as st
from collections import OrderedDict

FLOOR = "pgbench-floor"


def load_peers(path):
    rows = []
    if not path:
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def load_latencies(path):
    """Latencies in ms, one per line, sorted; [] when there is no such file."""
    if not path or not os.path.isfile(path):
        return []
    with open(path) as f:
        return sorted(float(line) for line in f if line.strip())


def nearest_rank(sorted_values, p):
    """sorted[round(p * (n - 1))], halves rounded up: drover-bench's and the peers' rule."""
    return sorted_values[int(p * (len(sorted_values) - 1) + 0.5)]


def medians(rows):
    """{(peer, config): {"enqueue_per_s": m, "process_per_s": m, "p50_ms": m, ..., "partial": bool}}"""
    groups = OrderedDict()
    for r in rows:
        if r.get("system") == "drover":
            continue
        key = (r.get("peer", "?"), r.get("config", r.get("mode", "?")))
        groups.setdefault(key, []).append(r)
    out = OrderedDict()
    for key, rs in groups.items():
        m = {"runs": len(rs), "partial": any(r.get("partial") for r in rs),
             "aborted": any(r.get("aborted") for r in rs)}
        for field in ("enqueue_per_s", "process_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            xs = [r[field] for r in rs if isinstance(r.get(field), (int, float))]
            m[field] = st.median(xs) if xs else None
        out[key] = m
    return out


def best(groups, field, want_max=True, include=lambda peer, cfg: peer != FLOOR):
    cands = [(m[field], peer, cfg, m) for (peer, cfg), m in groups.items()
             if m.get(field) is not None and include(peer, cfg)]
    if not cands:
        return None
    return (max if want_max else min)(cands, key=lambda c: c[0])


def fmt_num(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def drover_summary(doc, store, scenario):
    for s in doc.get("summary", []):
        if s.get("store") == store and s.get("scenario") == scenario:
            return s
    return None


def summarize(measurements):
    """drover-bench's summary (report.rs `summarize`) over `measurements`: per store and
    scenario in first-seen order, the median, min and max of each throughput, and the median of
    each latency percentile over the repetitions."""
    groups = OrderedDict()
    for m in measurements:
        groups.setdefault((m.get("store"), m.get("scenario")), []).append(m)
    out = []
    for (store, scenario), ms in groups.items():
        s = {"store": store, "scenario": scenario, "config": ms[0].get("config", "?"),
             "runs": len(ms)}
        for field in ("enqueue_per_s", "process_per_s"):
            xs = [m[field] for m in ms if isinstance(m.get(field), (int, float))]
            if xs:
                s[field] = {"median": st.median(xs), "min": min(xs), "max": max(xs)}
        fields = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
        if all(isinstance(m.get(f), (int, float)) for m in ms for f in fields):
            s["latency"] = {f: st.median([m[f] for m in ms]) for f in fields}
        out.append(s)
    return out


def spread_median(s, field):
    if not s or not s.get(field):
        return None
    return s[field]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peers_jsonl", nargs="?", default="")
    ap.add_argument("drover_json", nargs="+",
                    help="drover-bench results files; several are pooled (see the module docs)")
    ap.add_argument("--clients", type=int, default=8,
                    help="pgbench clients matched to Drover's producers (default 8)")
    ap.add_argument("--floor-latency", default="",
                    help="latencies of the commit-latency probe, ms, one per line (compare.sh: "
                         "one-row INSERT per transaction, 1 client, at the latency workload's rate)")
    args = ap.parse_args()

    groups = medians(load_peers(args.peers_jsonl))
    docs = []
    for path in args.drover_json:
        with open(path) as f:
            docs.append(json.load(f))
    doc = dict(docs[0])
    if len(docs) > 1:
        doc["summary"] = summarize([m for d in docs for m in d.get("measurements", [])])

    rows = []  # (workload, drover, peer figure, peer label, ratio text, target text, verdict)

    def add(workload, d, peer, target, higher_better=True, unit_digits=0, abs_target=None):
        if peer is not None:
            pv, pname, pcfg, pm = peer
            label = f"{pname}: {pcfg}" + (" PARTIAL" if pm.get("partial") else "")
        else:
            pv, label = None, "-"
        ratio = (d / pv) if (d is not None and pv) else None
        ratio_text = "-" if ratio is None else f"{ratio:.2f}x"
        verdict = ""
        if abs_target is not None and d is not None:
            verdict = "met" if abs_target(d) else "not met"
        elif target is not None and ratio is not None:
            verdict = "met" if (ratio >= target if higher_better else ratio <= target) else "not met"
        rows.append((workload, fmt_num(d, unit_digits), fmt_num(pv, unit_digits), label,
                     ratio_text, verdict))

    pg = lambda sc: drover_summary(doc, "postgres", sc)
    mem = lambda sc: drover_summary(doc, "memory", sc)

    # Batch enqueue vs the fastest peer queue's bulk enqueue (target: 2x).
    add("PG enqueue, batches of 1,000 (jobs/s) [target >= 2x]",
        spread_median(pg("enqueue_batch"), "enqueue_per_s"), best(groups, "enqueue_per_s"), 2.0)

    # Single-job enqueue vs pgbench one-row INSERT per transaction with as many clients.
    def floor_insert1(peer, cfg):
        m = re.match(r"insert 1 row/tx\s+c=(\d+)", cfg)
        return peer == FLOOR and m is not None and int(m.group(1)) == args.clients
    ref = best(groups, "enqueue_per_s", include=floor_insert1)
    if ref is None:  # fall back to the largest client count measured
        def any_insert1(peer, cfg):
            m = re.match(r"insert 1 row/tx\s+c=(\d+)", cfg)
            return peer == FLOOR and m is not None and int(m.group(1)) > 1
        ref = best(groups, "enqueue_per_s", include=any_insert1)
    add(f"PG enqueue, 1 job/call, {args.clients} producers (jobs/s) [target >= 0.8x pgbench]",
        spread_median(pg("enqueue_single"), "enqueue_per_s"), ref, 0.8)

    # Processing vs the fastest peer (target: 1.5x).
    best_proc = best(groups, "process_per_s")
    for s in doc.get("summary", []):
        if s.get("store") == "postgres" and s.get("scenario", "").startswith("process_"):
            add(f"PG process, {s['config']} (jobs/s) [target >= 1.5x]",
                spread_median(s, "process_per_s"), best_proc, 1.5)

    # Latency: lowest peer p50 / p99; absolute targets p50 < 3 ms, p99 < 10 ms.
    lat = pg("latency")
    lat_pg = lat.get("latency") if lat else None
    add("PG enqueue-to-start p50 (ms) [target < 3 ms; ratio: lower is better]",
        lat_pg and lat_pg["p50_ms"], best(groups, "p50_ms", want_max=False), None, False, 2,
        abs_target=lambda v: v < 3.0)
    add("PG enqueue-to-start p99 (ms) [target < 10 ms; ratio: lower is better]",
        lat_pg and lat_pg["p99_ms"], best(groups, "p99_ms", want_max=False), None, False, 2,
        abs_target=lambda v: v < 10.0)

    # Memory store: absolute target on end-to-end processing.
    mem_best = None
    for s in doc.get("summary", []):
        if s.get("store") == "memory" and s.get("scenario", "").startswith("process_"):
            v = spread_median(s, "process_per_s")
            if v is not None and (mem_best is None or v > mem_best[0]):
                mem_best = (v, s["config"])
    if mem_best:
        rows.append((f"memory process, best: {mem_best[1]} (jobs/s) [target >= 500,000]",
                     fmt_num(mem_best[0]), "-", "-", "-",
                     "met" if mem_best[0] >= 500_000 else "not met"))

    machine = doc.get("machine", {})
    pginfo = doc.get("postgres") or {}
    print(f"Drover vs peers - {doc.get('started_at', '?')} - {machine.get('nproc', '?')} cores "
          f"({machine.get('cpu_model', '?')}), load at start {machine.get('load_average_start')}"
          + (" NOISY" if doc.get("noisy") else ""))
    if pginfo:
        settings = pginfo.get("settings", {})
        print(f"{pginfo.get('version', '?').split(' on ')[0]}; fsync={settings.get('fsync')} "
              f"synchronous_commit={settings.get('synchronous_commit')}; "
              f"Drover n={doc['plan']['jobs']} reps="
              + "+".join(str(d.get("plan", {}).get("reps", "?")) for d in docs)
              + f", quotas {doc.get('quotas')}")
    w = [max(len(r[i]) for r in rows + [("workload", "Drover", "peer", "best peer (config)", "ratio", "")])
         for i in range(6)]
    w[3] = min(w[3], 60)
    head = ("workload", "Drover", "peer", "best peer (config)", "ratio", "target")
    print(f"{head[0]:<{w[0]}}  {head[1]:>{w[1]}}  {head[2]:>{w[2]}}  {head[3]:<{w[3]}}  {head[4]:>{w[4]}}  {head[5]}")
    for r in rows:
        print(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3][:w[3]]:<{w[3]}}  {r[4]:>{w[4]}}  {r[5]}")

    if len(docs) > 1:
        print()
        print("Drover's figures above are medians over the repetitions of these runs "
              "(medians of each):")
        for path, d in zip(args.drover_json, docs):
            parts = []
            for s in d.get("summary", []):
                if s["store"] != "postgres":
                    continue
                if s.get("latency"):
                    parts.append(f"{s['scenario']} p50 {s['latency']['p50_ms']:.2f} / "
                                 f"p99 {s['latency']['p99_ms']:.2f} ms")
                for field in ("enqueue_per_s", "process_per_s"):
                    if s.get(field):
                        parts.append(f"{s['scenario']} {fmt_num(s[field]['median'])}")
            print(f"  {os.path.basename(path)} ({d.get('started_at', '?')} - "
                  f"{d.get('finished_at', '?')}, load at start "
                  f"{(d.get('machine') or {}).get('load_average_start')}):")
            for i in range(0, len(parts), 4):
                print("    " + "; ".join(parts[i:i + 4]))

    floor_ms = load_latencies(args.floor_latency)
    if floor_ms:
        p50 = nearest_rank(floor_ms, 0.50)
        print()
        print(f"commit-latency floor on this disk (pgbench one-row INSERT per transaction, 1 "
              f"client, {len(floor_ms)} transactions): p50 {p50:.2f} / p90 "
              f"{nearest_rank(floor_ms, 0.90):.2f} / p99 {nearest_rank(floor_ms, 0.99):.2f} / "
              f"max {floor_ms[-1]:.2f} ms.")
        print("  Enqueue-to-start holds two durable commits in a row (the enqueue's, then the "
              "claim's),")
        print(f"  so about 2 x p50 = {2 * p50:.2f} ms is the floor of its p50 here, and "
              "a p99 under a target")
        print("  that one commit's own p99 exceeds is out of reach for any queue with default "
              "durability.")

    refs = [(cfg, m) for (peer, cfg), m in groups.items() if peer == FLOOR]
    if refs:
        print()
        print("pgbench references (PostgreSQL floor on this machine, medians):")
        for cfg, m in refs:
            v = m.get("process_per_s") or m.get("enqueue_per_s")
            what = "process" if m.get("process_per_s") else "enqueue"
            print(f"  {cfg:<34} {what} {fmt_num(v):>10} jobs/s" + (" ABORTED" if m.get("aborted") else ""))


if __name__ == "__main__":
    main()
