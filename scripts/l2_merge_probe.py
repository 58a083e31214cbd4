"""Does L2 look up once for two SMs that read the same bytes at the same time? (ncu counters; H100)

One block per SM (the shared memory it asks for leaves room for no second) streams a region of global
memory; which region is chosen from the SM the block landed on (%smid), so that chosen pairs of SMs read the
same bytes in step:
  own     every SM its own region                         (the baseline: every sector looked up once per SM)
  tpc     SMs 2j and 2j+1 share                           (the two SMs of one TPC, if TPCs are numbered so)
  next    SMs 4j+i and 4j+i+2 share                       (neighbouring TPCs)
  far     SMs s and s+64 share                            (far apart)
  all     every SM reads region 0
Two ways to read: `bulk` (one thread keeps four 32 KiB 1-D copies of the copy engine in flight, as the TMA
rungs do) and `lsu` (256 threads, 16-byte ld.global.cg, as a cp.async rung does); and, for `tpc`, the odd SM
of each pair starting late (spinning on the global timer first) to find the window in which reads combine.

    python3 scripts/l2_merge_probe.py            # runs itself under ncu and prints a table
    python3 scripts/l2_merge_probe.py --child    # the launches ncu profiles

The placement of a plain 1-D grid of one block per SM (which block ids land on the SMs of one TPC) is
printed from the `own` launch, for the model's assumption about persistent grids.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

SRC = r"""
extern "C" __global__ void probe(const char* base, unsigned long long region_bytes, int mode, int lsu,
                                 long long delay_ns, int* smids, float* sink) {
    extern __shared__ __align__(128) unsigned char buf[];
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) smids[blockIdx.x] = smid;
    unsigned region = smid;
    if (mode == 1) region = smid & ~1u;
    else if (mode == 2) region = smid & ~2u;
    else if (mode == 3) region = smid & ~64u;
    else if (mode == 4) region = 0;
    if (delay_ns > 0 && (smid & 1)) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < delay_ns);
    }
    const char* src = base + (unsigned long long)region * region_bytes;
    if (lsu >= 2) {  // cp.async.cg, 16 bytes a thread, as rung 11 copies its tiles: rows of row_b bytes at pitch
        const unsigned row_b = lsu >> 8 & 0xfff, pitch = 2 * row_b, cpr = row_b / 16;
        const unsigned pad = lsu & 16, dst_pitch = row_b + pad, with_size = lsu & 32;
        const unsigned long long chunks = region_bytes / pitch * cpr;  // half of every pitch read
        const unsigned per_batch = 16384 / 16;
        unsigned sbase = (unsigned)__cvta_generic_to_shared(buf);
        for (unsigned long long c0 = 0; c0 < chunks; c0 += per_batch) {
            for (unsigned e = threadIdx.x; e < per_batch; e += blockDim.x) {
                unsigned long long ce = c0 + e;
                unsigned long long r = ce / cpr, c = ce % cpr;
                unsigned dst = sbase + (unsigned)((e / cpr) * dst_pitch + c * 16) % (96 * 1024);
                const char* g = src + r * pitch + c * 16;
                if (with_size) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(g), "r"(16));
                else asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(g));
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
            __syncthreads();
        }
        return;
    }
    if (lsu) {
        float acc = 0.f;
        for (unsigned long long off = threadIdx.x * 16ull; off < region_bytes; off += blockDim.x * 16ull) {
            float4 v = __ldcg(reinterpret_cast<const float4*>(src + off));
            acc += v.x + v.y + v.z + v.w;
        }
        if (acc == 12345.f) sink[0] = acc;
        return;
    }
    if (threadIdx.x != 0) return;
    const unsigned CHUNK = 32768, SLOTS = 4;
    unsigned bars = (unsigned)__cvta_generic_to_shared(buf + SLOTS * CHUNK);
    for (unsigned s = 0; s < SLOTS; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * s));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    unsigned long long chunks = region_bytes / CHUNK;
    for (unsigned long long c = 0; c < chunks + SLOTS; ++c) {
        unsigned s = c % SLOTS;
        unsigned bar = bars + 8 * s;
        if (c >= SLOTS) {  // wait for the copy issued SLOTS chunks ago into this slot
            unsigned parity = ((c - SLOTS) / SLOTS) & 1, done = 0;
            while (!done) {
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                             : "=r"(done) : "r"(bar), "r"(parity) : "memory");
            }
        }
        if (c < chunks) {
            unsigned dst = (unsigned)__cvta_generic_to_shared(buf + s * CHUNK);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(CHUNK) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(dst), "l"(src + c * CHUNK), "r"(CHUNK), "r"(bar) : "memory");
        }
    }
}
"""
MODES = ("own", "tpc", "next", "far", "all")
REGION = 4 << 20
# cp.async as rung 11 copies: rows of 64 bytes (A's k step) or 256 (B's 128 columns) at twice that pitch,
# shared-memory rows padded by 16 bytes or not, with the src-size operand or without.
LDGSTS = [(rb, pad, size) for rb in (64, 256) for pad in (0, 16) for size in (0, 32)]
CASES = [(mode, path, 0) for path in ("bulk", "lsu") for mode in MODES] + \
        [("tpc", "bulk", d) for d in (500, 2000, 10000, 50000)] + \
        [("own", f"ldgsts{rb}{'p' if pad else ''}{'s' if size else ''}", 0) for rb, pad, size in LDGSTS]


def _code(path: str) -> int:
    """The kernel's `lsu` argument: 0 bulk, 1 ld.global.cg, else cp.async (row bytes << 8 | pad | size)."""
    if path == "bulk":
        return 0
    if path == "lsu":
        return 1
    rb = int(path[6:].rstrip("ps"))
    return rb << 8 | (16 if "p" in path[6:] else 0) | (32 if path.endswith("s") else 0)
METRICS = ("lts__t_sectors_srcunit_tex.sum", "lts__t_requests_srcunit_tex.sum",
           "l1tex__m_xbar2l1tex_read_bytes.sum", "gpu__time_duration.sum")


def child(out: str) -> None:
    import cupy as cp

    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    kern = cp.RawKernel(SRC, "probe", options=("-std=c++17",))
    smem = 200 * 1024  # four 32 KiB slots and their barriers, and enough more that no second block fits
    kern.max_dynamic_shared_size_bytes = smem
    nsmid = 160
    data = cp.random.rand(nsmid * REGION // 4, dtype=cp.float32)
    smids = cp.zeros(sms, cp.int32)
    sink = cp.zeros(1, cp.float32)
    placement = None
    for mode, path, delay in CASES:
        kern((sms,), (32 if path == "bulk" else 256,),
             (data, cp.uint64(REGION), cp.int32(MODES.index(mode)), cp.int32(_code(path)), cp.int64(delay),
              smids, sink), shared_mem=smem)
        dev.synchronize()
        if placement is None:
            placement = smids.get().tolist()
    with open(out, "w") as f:
        json.dump({"sms": sms, "placement": placement}, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", default="", help="(internal) write the placement here and launch the cases")
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    tmp = tempfile.mkdtemp()
    place = os.path.join(tmp, "placement.json")
    cmd = ["ncu", "--clock-control", "none", "--cache-control", "all", "-k", "probe", "--csv",
           "--metrics", ",".join(METRICS), sys.executable, __file__, "--child", place]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stdout[-3000:], res.stderr[-3000:])
        raise SystemExit(res.returncode)
    lines = res.stdout[res.stdout.index('"ID"'):]
    rows: dict[int, dict[str, float]] = {}
    for r in csv.DictReader(io.StringIO(lines)):
        v = float(r["Metric Value"].replace(",", "")) if r["Metric Value"] not in ("", "n/a") else float("nan")
        unit = r.get("Metric Unit", "")
        scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3}
        rows.setdefault(int(r["ID"]), {})[r["Metric Name"]] = v * scale.get(unit, 1.0)
    info = json.load(open(place))
    sms, placement = info["sms"], info["placement"]
    pairs_same_tpc = sum(1 for j in range(0, sms - 1, 2) if placement[j] // 2 == placement[j + 1] // 2)
    print(f"placement of a 1-D grid of {sms} blocks: block ids 2j, 2j+1 on one TPC (smid // 2) for "
          f"{pairs_same_tpc} of {sms // 2} pairs; first 16 smids: {placement[:16]}")
    # sectors every SM asked for, from the regions: each block reads REGION bytes (cp.async: half of them)
    print(f"{'case':<22}{'L2 sectors / asked':>20}{'requests':>12}{'xbar / asked':>14}{'time us':>10}")
    for i, (mode, path, delay) in enumerate(CASES):
        r = rows.get(i, {})
        sec = r.get("lts__t_sectors_srcunit_tex.sum", float("nan"))
        xb = r.get("l1tex__m_xbar2l1tex_read_bytes.sum", float("nan"))
        req = r.get("lts__t_requests_srcunit_tex.sum", float("nan"))
        t = r.get("gpu__time_duration.sum", float("nan"))
        asked = sms * REGION / 32 / (2 if path.startswith("ldgsts") else 1)
        label = f"{mode} {path}" + (f" +{delay} ns" if delay else "")
        print(f"{label:<22}{sec / asked:>20.3f}{req:>12.3g}{xb / (asked * 32):>14.3f}{t * 1e6:>10.1f}")


if __name__ == "__main__":
    main()
