#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Runs a job with --courier:trace=PATH and checks the trace files it leaves (only json):

  trace_check.py --trace PATH --localities N [--min-rma-bytes B] [--expect-dropped] -- COMMAND...

COMMAND must pass --courier:trace=PATH. Every locality's file (PATH with ".R" before the
extension) must load, name its process and worker threads, hold task slices on worker threads
that do not overlap, and valid timestamps. Unless events were dropped: the user parcels
(requests and replies) one locality sent match, kind, request id and size, those its peer
received; some RMA read of at least B bytes was traced, as was the parcel that carried them.
--expect-dropped: the job ran with a small --courier:trace_events, so every file must say
that events were dropped and hold no more than the limit. A parcel must not arrive before it
left (the localities share a host's CLOCK_MONOTONIC).
"""
import argparse
import collections
import json
import math
import os
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def file_for_locality(path, r):
    head, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    return os.path.join(head, f"{stem}.{r}{ext}")


def valid_time(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


def check_file(r, doc):
    """Checks one locality's file; returns its events by kind."""
    check(isinstance(doc, dict) and "traceEvents" in doc, f"{r}: no traceEvents")
    meta = doc.get("otherData", {})
    check(meta.get("locality") == r, f"{r}: otherData.locality is {meta.get('locality')}")
    workers = meta.get("workers")
    check(isinstance(workers, int) and workers >= 1, f"{r}: otherData.workers is {workers}")
    for key in ("events", "dropped_events", "event_limit"):
        check(isinstance(meta.get(key), int) and meta[key] >= 0, f"{r}: otherData.{key}")
    names = {}
    kinds = collections.defaultdict(list)
    recorded = 0
    for e in doc["traceEvents"]:
        check(e.get("pid") == r, f"{r}: event with pid {e.get('pid')}")
        ph = e.get("ph")
        if ph == "M":
            if e["name"] == "thread_name":
                names[e["tid"]] = e["args"]["name"]
            elif e["name"] == "process_name":
                check(e["args"]["name"] == f"locality {r}", f"{r}: process_name {e['args']}")
            continue
        check(valid_time(e.get("ts")), f"{r}: bad ts in {e}")
        if ph == "X":
            check(valid_time(e.get("dur")), f"{r}: bad dur in {e}")
        if ph != "e":
            recorded += 1
        kinds[(e.get("cat"), ph)].append(e)
    for w in range(workers or 0):
        check(names.get(w) == f"worker {w}", f"{r}: thread_name of worker {w} is {names.get(w)}")
    check(recorded == meta.get("events"),
          f"{r}: {recorded} events in the file, otherData.events says {meta.get('events')}")

    tasks = kinds[("task", "X")]
    check(len(tasks) > 0, f"{r}: no task events")
    by_tid = collections.defaultdict(list)
    for t in tasks:
        check(isinstance(t["tid"], int) and 0 <= t["tid"] < workers,
              f"{r}: task on tid {t['tid']}, not a worker")
        check(t["args"]["end"] in ("completed", "suspended"), f"{r}: task end {t['args']}")
        by_tid[t["tid"]].append(t)
    for tid, ts in by_tid.items():
        ts.sort(key=lambda t: t["ts"])
        for a, b in zip(ts, ts[1:]):
            if a["ts"] + a["dur"] > b["ts"] + 1e-3:
                check(False, f"{r}: task slices overlap on worker {tid}: {a} {b}")
                break

    reads = {}
    for b in kinds[("rma", "b")]:
        reads[b["id"]] = b
    for e in kinds[("rma", "e")]:
        b = reads.get(e["id"])
        if check(b is not None, f"{r}: rma read end without a begin: {e}"):
            check(e["ts"] >= b["ts"], f"{r}: rma read ends before it begins: {b} {e}")
    return {
        "meta": meta,
        "tasks": tasks,
        "sent": [e for e in kinds[("parcel", "i")] if e["name"] == "parcel sent"],
        "received": [e for e in kinds[("parcel", "i")] if e["name"] == "parcel received"],
        "reads": list(reads.values()),
    }


def user_parcels(events, r, sent):
    """(source, destination, kind, request id, bytes) of the requests and replies."""
    out = collections.Counter()
    for e in events:
        a = e["args"]
        if a["control"] or a["kind"] not in ("request", "reply", "ordered_request"):
            continue
        src, dst = (r, a["peer"]) if sent else (a["peer"], r)
        out[(src, dst, a["kind"], a["request_id"], a["bytes"])] += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--localities", type=int, required=True)
    ap.add_argument("--min-rma-bytes", type=int, default=0)
    ap.add_argument("--expect-dropped", action="store_true")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    files = [file_for_locality(args.trace, r) for r in range(args.localities)]
    for f in files:
        if os.path.exists(f):
            os.remove(f)
    rc = subprocess.call(command)
    if rc != 0:
        print(f"trace_check: the job failed with status {rc}")
        return 1

    traces = []
    for r, f in enumerate(files):
        try:
            with open(f) as fh:
                traces.append(check_file(r, json.load(fh)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            failures.append(f"{f}: malformed: {e!r}")
            traces.append(None)
    if any(t is None for t in traces):
        return report(traces)

    dropped = sum(t["meta"]["dropped_events"] for t in traces)
    if args.expect_dropped:
        for r, t in enumerate(traces):
            m = t["meta"]
            check(m["dropped_events"] > 0, f"{r}: no events dropped (limit {m['event_limit']})")
            check(m["events"] <= m["event_limit"],
                  f"{r}: {m['events']} events kept, over the limit {m['event_limit']}")
        return report(traces)
    check(dropped == 0, f"{dropped} events dropped")

    # Every user parcel sent was received (termination waits for them), with its size.
    sent = collections.Counter()
    received = collections.Counter()
    for r, t in enumerate(traces):
        sent += user_parcels(t["sent"], r, True)
        received += user_parcels(t["received"], r, False)
    check(sum(sent.values()) > 0, "no user parcels traced")
    missing = sent - received
    extra = received - sent
    check(not missing, f"sent, never received: {list(missing.items())[:5]}")
    check(not extra, f"received, never sent: {list(extra.items())[:5]}")

    # The localities' clocks agree (one host): a parcel arrives after it left.
    left = {}
    for r, t in enumerate(traces):
        for e in t["sent"]:
            a = e["args"]
            left.setdefault((r, a["peer"], a["kind"], a["request_id"]), []).append(e["ts"])
    for r, t in enumerate(traces):
        for e in t["received"]:
            a = e["args"]
            times = left.get((a["peer"], r, a["kind"], a["request_id"]))
            if a["request_id"] != "0x0" and times and len(times) == 1:
                check(e["ts"] >= times[0] - 100,
                      f"{r}: parcel received {times[0] - e['ts']:.1f} us before it was sent: {e}")

    if args.min_rma_bytes:
        big_reads = [(r, b) for r, t in enumerate(traces) for b in t["reads"]
                     if b["args"]["bytes"] >= args.min_rma_bytes]
        check(big_reads, f"no RMA read of at least {args.min_rma_bytes} bytes")
        for r, b in big_reads[:1]:
            carriers = [e for e in traces[r]["received"]
                        if e["args"]["peer"] == b["args"]["peer"]
                        and e["args"]["zero_copy_bytes"] >= args.min_rma_bytes]
            check(carriers, f"{r}: no received parcel carries the {b['args']['bytes']} bytes read")
            senders = [e for e in traces[b["args"]["peer"]]["sent"]
                       if e["args"]["peer"] == r
                       and e["args"]["zero_copy_bytes"] >= args.min_rma_bytes]
            check(senders, f"{b['args']['peer']}: sent no parcel with the large argument")

    # One clock (CLOCK_MONOTONIC on one host): the files span the job, not more.
    stamps = [e["ts"] for t in traces for k in ("tasks", "sent", "received") for e in t[k]]
    check(stamps, "no events with timestamps")
    check(not stamps or max(stamps) - min(stamps) < 600e6, "timestamps span more than 10 minutes")
    return report(traces)


def report(traces):
    for r, t in enumerate(traces):
        if t is not None:
            print(f"trace_check: locality {r}: {len(t['tasks'])} task slices, "
                  f"{len(t['sent'])} parcels sent, {len(t['received'])} received, "
                  f"{len(t['reads'])} RMA reads, {t['meta']['dropped_events']} dropped")
    for f in failures[:20]:
        print("trace_check: FAILED:", f)
    print("trace_check:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
