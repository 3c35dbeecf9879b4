#!/usr/bin/env python3
"""Runs secmem's SSD and MQSim (CMU-SAFARI/MQSim, built from source) on the same MQSim ASCII
traces and prints both simulators' mean and maximum response times (docs/ssd.md, Validation).

    python3 scripts/validate/mqsim_compare.py --mqsim-src DIR [--work DIR]

DIR is a checkout of https://github.com/CMU-SAFARI/MQSim (built here with `make` if its
binary is missing). MQSim is set to secmem's drive as far as its parameters go: 8 channels of
8 dies (4 chips x 2) x 2 planes, 4 KB pages, 256-page blocks, tR 3 us, tPROG 100 us, tBERS
1 ms, an 800 MT/s channel, a 64 MiB write cache, a 16 MiB mapping cache, 7% spare, 16 GiB.
secmem runs the drive alone: no host costs, no DMA through memory, slots enough for every
request (MQSim's queue takes 65,535). Both start empty; each trace writes its pages first.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys

TRACES = {
    # name: (pages, read gap ns (None: writes only), write gap ns)
    "idle-read": (4000, 100_000, 50_000),
    "burst-read": (40000, 0, 50_000),
    "idle-write": (4000, None, 100_000),
    "burst-write": (40000, None, 0),
}

SETTINGS = [
    ("Enabled_Preconditioning", "false"), ("Channel_Transfer_Rate", 800), ("Chip_No_Per_Channel", 4), ("Die_No_Per_Chip", 2),
    ("Plane_No_Per_Die", 2), ("Block_No_Per_Plane", 128), ("Page_No_Per_Block", 256), ("Page_Capacity", 4096),
    ("Page_Read_Latency_LSB", 3000), ("Page_Read_Latency_CSB", 3000), ("Page_Read_Latency_MSB", 3000),
    ("Page_Program_Latency_LSB", 100000), ("Page_Program_Latency_CSB", 100000), ("Page_Program_Latency_MSB", 100000),
    ("Block_Erase_Latency", 1000000), ("Flash_Technology", "SLC"), ("Data_Cache_Capacity", 64 << 20), ("CMT_Capacity", 16 << 20),
    ("Overprovisioning_Ratio", 0.07),
]

WORKLOAD = """<?xml version="1.0" encoding="us-ascii"?>
<MQSim_IO_Scenarios><IO_Scenario><IO_Flow_Parameter_Set_Trace_Based>
<Priority_Class>HIGH</Priority_Class><Device_Level_Data_Caching_Mode>WRITE_CACHE</Device_Level_Data_Caching_Mode>
<Channel_IDs>0,1,2,3,4,5,6,7</Channel_IDs><Chip_IDs>0,1,2,3</Chip_IDs><Die_IDs>0,1</Die_IDs><Plane_IDs>0,1</Plane_IDs>
<Initial_Occupancy_Percentage>0</Initial_Occupancy_Percentage><File_Path>TRACE</File_Path>
<Percentage_To_Be_Executed>100</Percentage_To_Be_Executed><Relay_Count>1</Relay_Count><Time_Unit>NANOSECOND</Time_Unit>
</IO_Flow_Parameter_Set_Trace_Based></IO_Scenario></MQSim_IO_Scenarios>
"""


def write_trace(path, pages, read_gap, write_gap, rnd):
    space = (8 << 30) // 4096
    addrs = rnd.sample(range(space), pages)
    t, lines = 0, []
    for a in addrs:
        lines.append(f"{t} 0 {a * 8} 8 0")
        t += write_gap
    if read_gap is not None:
        t += 1_000_000_000  # a second for the writes to reach flash
        rnd.shuffle(addrs)
        for a in addrs:
            lines.append(f"{t} 0 {a * 8} 8 1")
            t += read_gap
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def mqsim(binary, work, name):
    wl = os.path.join(work, f"wl-{name}.xml")
    with open(wl, "w") as f:
        f.write(WORKLOAD.replace("TRACE", os.path.join(work, f"{name}.trace")))
    subprocess.run([binary, "-i", os.path.join(work, "ssd.xml"), "-w", wl], check=True, stdout=subprocess.DEVNULL, cwd=work)
    x = open(os.path.join(work, f"wl-{name}_scenario_1.xml")).read()
    flow = re.search(r"<Host.IO_Flow>(.*?)</Host.IO_Flow>", x, re.S).group(1)
    v = dict(re.findall(r"<(\w+)>([^<]*)</\1>", flow))
    return float(v["Device_Response_Time"]), float(v["Max_Device_Response_Time"])


def secmem(work, name):
    params = ["ssd.capacity_gib=16", "io.space_gib=8", "io.precondition=false", "io.dma_through_memory=false", "io.submit_us=0",
              "io.complete_us=0", "io.pcie_latency_ns=0", "io.threads=1", "io.queue_depth=65536",
              f'io.trace="{os.path.join(work, name + ".trace")}"']
    args = [sys.executable, "-m", "secmem", "io", "--preset", "dshield"] + [a for p in params for a in ("-p", p)]
    r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    return r["io"]["latency_us"]["mean"], r["io"]["latency_us"]["max"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mqsim-src", required=True)
    ap.add_argument("--work", default="mqsim-compare")
    a = ap.parse_args()
    binary = os.path.abspath(os.path.join(a.mqsim_src, "MQSim"))
    if not os.path.exists(binary):
        subprocess.run(["make", "-j2"], cwd=a.mqsim_src, check=True)
    os.makedirs(a.work, exist_ok=True)
    work = os.path.abspath(a.work)
    cfg = open(os.path.join(a.mqsim_src, "ssdconfig.xml")).read()
    for tag, val in SETTINGS:
        cfg, n = re.subn(f"<{tag}>[^<]*</{tag}>", f"<{tag}>{val}</{tag}>", cfg)
        assert n == 1, tag
    with open(os.path.join(work, "ssd.xml"), "w") as f:
        f.write(cfg)
    rnd = random.Random(7)
    print(f"{'trace':<12} {'secmem mean us':>15} {'MQSim mean us':>14} {'secmem max us':>14} {'MQSim max us':>13}")
    for name, (pages, read_gap, write_gap) in TRACES.items():
        write_trace(os.path.join(work, f"{name}.trace"), pages, read_gap, write_gap, rnd)
        sm, sx = secmem(work, name)
        mm, mx = mqsim(binary, work, name)
        print(f"{name:<12} {sm:>15.1f} {mm:>14.1f} {sx:>14.1f} {mx:>13.1f}")


if __name__ == "__main__":
    main()
