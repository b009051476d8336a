#!/usr/bin/env python3
"""No wall clock compared across hosts without an offset: a 3-D job (18 ranks on 3 hosts) whose
dumps were written into a shared directory, one host's clock 5 s off. The file system stamped
every dump as it was written (mtime); the analyzer sets each host's clock against it, says which
host it corrected and by how much, and then judges as if the clocks agreed: a healthy job reads
OK, a straggler on the skewed host is named. Files copied later (mtimes hours after the dumps)
give no correction.

usage: check_clocks.py GEN_DUMPS ANALYZER
"""
import glob, json, os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wd_check import check, finish  # noqa: E402

GEN, ANA = sys.argv[1], sys.argv[2]


def skew(d, host, by_s, write_delay_s=0.05, copied=False):
    for f in glob.glob(os.path.join(d, "**", "*.json"), recursive=True):
        doc = json.load(open(f))
        wall = int(doc["time"]["wall_ns"], 16)
        if doc["host"] == host:
            doc["time"]["wall_ns"] = hex(wall + int(by_s * 1e9))
            json.dump(doc, open(f, "w"))
        t = (wall / 1e9 + write_delay_s) if not copied else (wall / 1e9 + 6 * 3600)
        os.utime(f, (t, t))


def run(d, *extra):
    p = subprocess.run([ANA, *extra, d], capture_output=True, text=True, timeout=120)
    return p.stdout


def main():
    root = tempfile.mkdtemp(prefix="wd-clocks-")
    try:
        d = os.path.join(root, "healthy")
        subprocess.run([GEN, d, "--layout=2x3x3", "--scenario=healthy"], check=True, capture_output=True)
        skew(d, "node001", +5.0)
        out = run(d)
        first = out.splitlines()[0]
        check(first.startswith("OK"), f"healthy, node001 5 s ahead: OK ({first[:160]})")
        check("node001's clock read 5.0 s ahead" in out, "the report says which host was corrected, by how much")

        d = os.path.join(root, "straggler")
        subprocess.run([GEN, d, "--layout=2x3x3", "--scenario=straggler", "--victim=9"], check=True,
                       capture_output=True)
        base = run(d)
        victim_host = None
        for f in glob.glob(os.path.join(d, "**", "*.json"), recursive=True):
            doc = json.load(open(f))
            if str((doc.get("env") or {}).get("RANK")) == "9":
                victim_host = doc["host"]
        skew(d, victim_host, -5.0)
        out = run(d)
        named = [l for l in out.splitlines() if "straggler" in l.lower() or "late" in l.lower()]
        base_named = [l for l in base.splitlines() if "straggler" in l.lower() or "late" in l.lower()]
        check(bool(base_named) == bool(named) and (not base_named or "9" in " ".join(named)),
              f"straggler (global rank 9) on {victim_host}, 5 s behind: named as with agreeing clocks "
              f"({(named or ['none'])[0][:160]})")

        # Cloned nodes: two machines named alike (their boot ids differ), one 5 s ahead. Each
        # machine's clock is set on its own; taken as one host, their dumps would disagree by 5 s
        # and nothing would be corrected.
        d = os.path.join(root, "cloned")
        subprocess.run([GEN, d, "--layout=2x3x3", "--scenario=healthy"], check=True, capture_output=True)
        for f in glob.glob(os.path.join(d, "**", "*.json"), recursive=True):
            doc = json.load(open(f))
            doc.setdefault("identity", {})["bootId"] = "boot-of-" + doc["host"]
            if doc["host"] == "node001":
                doc["host"] = "node000"
            json.dump(doc, open(f, "w"))
        for f in glob.glob(os.path.join(d, "**", "*.json"), recursive=True):
            doc = json.load(open(f))
            wall = int(doc["time"]["wall_ns"], 16)
            if doc["identity"]["bootId"] == "boot-of-node001":
                doc["time"]["wall_ns"] = hex(wall + int(5e9))
                json.dump(doc, open(f, "w"))
            t = wall / 1e9 + 0.05
            os.utime(f, (t, t))
        out = run(d)
        first = out.splitlines()[0]
        check(first.startswith("OK"), f"cloned names, one machine 5 s ahead: OK ({first[:160]})")
        check("host name node000 names 2 machines" in out, "the report says one host name names two machines")
        check("clock read 5.0 s ahead" in out, "the machine 5 s ahead is corrected on its own")

        d = os.path.join(root, "copied")
        subprocess.run([GEN, d, "--layout=2x3x3", "--scenario=healthy"], check=True, capture_output=True)
        skew(d, "node001", 0.0, copied=True)
        out = run(d)
        check("clock read" not in out, "files copied hours later: no host corrected")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish("check_clocks")


if __name__ == "__main__":
    sys.exit(main())
