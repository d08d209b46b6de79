#!/usr/bin/env python3
"""Lines up FC1 and FC2 of the last traced decode forward (a -DMOEJIT_TRACE=ON build).

Usage:
  MOEJIT_TRACE_DIR=DIR build/moejit bench --config gpt-oss-120b --tokens 2 --replays 10
  python3 tools/trace_timeline.py DIR

Run one token count per directory: each launch overwrites its module's records, and the dump happens
when the runtime unloads its modules, so DIR holds the last forward of every kernel that ran. Times are
microseconds from the first FC1 CTA's start (templates/trace.cuh lists the record slots; "first chunk"
is warp 0's first chunk of the CTA's last item where a CTA walks several). Per phase:
quantiles over CTAs; then the same split by how many of the kernel's CTAs shared an SM (where an SM
holding more CTAs finishes later, the grid is uneven), and FC2-sum's per-warp chunk rate.
"""
import glob
import os
import re
import struct
import sys
from collections import Counter

FC1, FC2, WARP, ROUTE = 1, 2, 3, 4


def records(path):
    data = open(path, "rb").read()
    return [struct.unpack_from("<8Q", data, 64 * i) for i in range(len(data) // 64)]


def quantiles(v):
    v = sorted(v)
    if not v:
        return "n    0"
    q = lambda p: v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]
    return f"n {len(v):5d}  min {q(0):7.2f}  p10 {q(.1):7.2f}  med {q(.5):7.2f}  p90 {q(.9):7.2f}  max {q(1):7.2f}"


def latest(dirpath, prefix, suffix):
    """The module of this kind whose CTA records are the most recent, with its records (each with its
    linear CTA index, the hardware's dispatch order, appended as element 8)."""
    best = None
    for path in glob.glob(os.path.join(dirpath, prefix + "*." + suffix + ".bin")):
        recs = [r + (i,) for i, r in enumerate(records(path)) if r[7] >> 32 and r[0]]
        if recs and (best is None or max(r[0] for r in recs) > best[2]):
            best = (path, recs, max(r[0] for r in recs))
    return best


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    fc1, fc2 = latest(d, "decode_fc1_", "cta"), latest(d, "decode_fc2", "cta")
    if not fc1 or not fc2:
        sys.exit(f"{d}: no FC1/FC2 trace records (a -DMOEJIT_TRACE=ON build with MOEJIT_TRACE_DIR set; the "
                 "decode kernels FC1 grid/loop/stream and FC2 sum/split record, the fused kernel does not)")
    # The last forward: FC1 CTAs that started within 200 us before the latest FC2 CTA.
    t2 = fc2[2]
    one = [r for r in fc1[1] if t2 - 200_000 < r[0] <= t2 and r[7] >> 32 == FC1 and r[6] > r[0]]
    two = [r for r in fc2[1] if t2 - 200_000 < r[0] and r[7] >> 32 == FC2]
    t0 = min(r[0] for r in one)
    us = lambda t: (t - t0) / 1000.0
    print(f"FC1 {os.path.basename(fc1[0])}: {len(one)} CTAs\nFC2 {os.path.basename(fc2[0])}: {len(two)} CTAs")
    route = latest(d, "route_", "cta")
    if route:  # the route kernel runs before FC1 (M*K > 64): its one CTA, if it belongs to this forward
        r = max((r for r in route[1] if r[7] >> 32 == ROUTE), key=lambda r: r[0])
        if t0 - 200_000 < r[0] <= t0:
            print(f"{'route kernel':>18}: start {us(r[0]):7.2f}  end {us(r[6]):7.2f}")
    for name, rows, slot in (("FC1 start", one, 0), ("FC1 routed", one, 1), ("FC1 first chunk", one, 4),
                             ("FC1 end", one, 6), ("FC2 start", two, 0), ("FC2 routed", two, 1),
                             ("FC2 wait returned", two, 3), ("FC2 first chunk", two, 4),
                             ("FC2 work done", two, 5), ("FC2 end", two, 6)):
        print(f"{name:>18}: {quantiles([us(r[slot]) for r in rows if r[slot] >= r[0]])}")
    for name, rows, slot in (("FC1 end", one, 6), ("FC2 work done", two, 5)):
        per_sm = Counter(r[7] & 0xFFFFFFFF for r in rows)
        by = {}
        for r in rows:
            if r[slot] >= r[0]:  # CTAs without work (slots beyond the active experts) stamp nothing
                by.setdefault(per_sm[r[7] & 0xFFFFFFFF], []).append(us(r[slot]))
        for n, v in sorted(by.items()):
            print(f"{name:>13}, {n:2d} CTAs/SM: {quantiles(v)}")
    # Is a kernel's tail the SMs' (some SMs slower throughout: dynamic work would help) or its CTAs'
    # (random per chain)? Spread of the per-SM medians against the spread around them.
    # Which CTAs of an SM end late: by launch rank on the SM (the order of their linear CTA indices; the
    # start stamps tie at the timer's 32 ns steps). A rising row means the SM's last-launched CTAs run
    # behind the others for their whole chain.
    for name, rows, slot in (("FC1 end", one, 6), ("FC2 work done", two, 5)):
        per = {}  # SM -> [(CTA index, time)], in launch order
        for r in sorted(rows, key=lambda r: r[8]):
            if r[slot] >= r[0]:
                per.setdefault(r[7] & 0xFFFFFFFF, []).append((r[8], us(r[slot])))
        med = {sm: sorted(t for _, t in v)[len(v) // 2] for sm, v in per.items()}
        print(f"{name + ', SM medians':>24}: {quantiles(list(med.values()))}")
        print(f"{name + ', CTA - its SM':>24}: {quantiles([t - med[sm] for sm, v in per.items() for _, t in v])}")
        by_rank = {}
        for sm, v in per.items():
            for k, (_, t) in enumerate(v):
                by_rank.setdefault(k, []).append(t - med[sm])
        ranks = "  ".join(f"{k}:{sorted(v)[len(v) // 2]:+.2f}" for k, v in sorted(by_rank.items()))
        print(f"{name + ', by launch rank':>24}: {ranks}  (median of CTA - its SM)")
    warp_path = fc2[0][: -len("cta.bin")] + "warp.bin"
    m = re.search(r"_w(\d+)n", os.path.basename(fc2[0]))
    if os.path.exists(warp_path) and m:
        per_cta = int(m.group(1))
        waits = {i: r[3] for i, r in enumerate(records(fc2[0]))}
        rate = []
        for i, w in enumerate(records(warp_path)):
            if w[7] >> 32 == WARP and w[0] > t0 and w[2] > w[0] and w[4] and waits.get(i // per_cta, 0) > t0:
                rate.append((w[2] - waits[i // per_cta]) / 1000.0 / w[4])
        print(f"{'FC2 us per chunk':>18}: {quantiles(rate)}  (per warp, from the wait to its last unit)")


if __name__ == "__main__":
    main()
