#!/usr/bin/env python3
"""The dump directory is shared and untrusted: files planted beside a real hang's dumps must not
block, exhaust or fool the analyzer. A 4-rank job whose rank 3 never entered the collective
(gen_dumps), then, each beside it, what another member of the group (or a crashed writer) can put
there. The analyzer must end in time, name rank 3, list what it skipped and why, and write valid
UTF-8. Run as root, a planted dump owned by another user is made with chown, and the plants are
played again with the job and its analyzer as an unprivileged user (root ignores permissions) and
every plant another user's; run as a user, those parts need other uids and are skipped with a
message.

usage: check_untrusted.py GEN_DUMPS ANALYZER
"""
import gzip, json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wd_check import check, finish  # noqa: E402

GEN, ANA = sys.argv[1], sys.argv[2]


def analyze(d, *extra, timeout=60):
    p = subprocess.run([ANA, *extra, d], capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def fresh(root, name):
    d = os.path.join(root, name)
    subprocess.run([GEN, d, "--ranks=4", "--scenario=not-entered", "--victim=3"], check=True,
                   capture_output=True)
    return d


def one_real_dump(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".json"))[0]


def named_rank3(out):
    first = out.decode("utf-8").splitlines()[0]
    return first.startswith("HANG") and "rank 3 never entered" in first, first


def plant_fifo(d, root):
    os.mkfifo(os.path.join(d, "node000-99999-0001-stall.json"))
    return "not a regular file"


def plant_zero(d, root):
    os.symlink("/dev/zero", os.path.join(d, "node000-99998-0001-stall.json"))
    return "symbolic link"


def plant_outside_file(d, root):
    outside = os.path.join(root, "outside.json")
    shutil.copy(os.path.join(d, one_real_dump(d)), outside)
    os.symlink(outside, os.path.join(d, "node000-99997-0001-stall.json"))
    return "symbolic link"


def plant_outside_dir(d, root):
    other = os.path.join(root, "elsewhere")
    fresh(root, "elsewhere-src")
    shutil.copytree(os.path.join(root, "elsewhere-src"), other)
    os.symlink(other, os.path.join(d, "node999"))
    return None  # never entered: nothing from it may be read


def plant_bomb(d, root):
    with gzip.open(os.path.join(d, "node000-99996-0001-stall.json.gz"), "wb", compresslevel=9) as g:
        chunk = b" " * (1 << 20)
        for _ in range(300):  # 300 MiB of blanks, a few hundred KiB compressed
            g.write(chunk)
    return "bound"


def plant_utf8(d, root):
    src = os.path.join(d, one_real_dump(d))
    doc = json.load(open(src))
    doc["pid"] = 55555
    doc["host"] = "nodeX"
    for c in doc.get("comms", []):
        c["commName"] = "PLANTED"
    raw = json.dumps(doc).replace('"PLANTED"', '"bad\\u00ff"').encode()
    raw = raw.replace("bad\\u00ff".encode(), b"bad\xff\xfe")
    open(os.path.join(d, "nodeX-55555-0001-signal.json"), "wb").write(raw)
    return None


def plant_many_comms(d, root):
    src = os.path.join(d, one_real_dump(d))
    doc = json.load(open(src))
    c0 = {k: v for k, v in doc["comms"][0].items() if k not in ("ring", "proxyRing", "inflight", "open", "telemetry")}
    doc["pid"] = 44444
    doc["comms"] = [dict(c0, commId="0x%016x" % (0x1000 + i), commName="planted%d" % i) for i in range(20000)]
    json.dump(doc, open(os.path.join(d, "node000-44444-0001-signal.json"), "w"))
    return "bound"


def plant_other_owner(d, root):
    if os.geteuid() != 0:
        print("SKIP other-owner: needs root to make a file of another uid")
        return "skip"
    src = os.path.join(d, one_real_dump(d))
    doc = json.load(open(src))
    doc["pid"] = 33333
    for c in doc["comms"]:
        c["rank"] = 1
    p = os.path.join(d, "node000-33333-0002-stall.json")
    json.dump(doc, open(p, "w"))
    os.chown(p, 65534, 65534)
    return "owned by uid 65534"


PLANTS = [plant_fifo, plant_zero, plant_outside_file, plant_outside_dir, plant_bomb, plant_utf8,
          plant_many_comms, plant_other_owner]


JOB_UID, OTHER_UID = 65532, 65531  # the job's user, and another member of its group


def as_job(cmd):
    return ["setpriv", f"--reuid={JOB_UID}", f"--regid={JOB_UID}", "--clear-groups", *cmd]


def unprivileged_pass():
    """The same plants as a user would meet them: the job and its analyzer run as an unprivileged
    user (root reads anything), in a directory the group may write, and every plant belongs to
    another member of the group. Each is skipped for what it is, and rank 3 is still named."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP unprivileged pass: needs root (to become two other users) and setpriv")
        return
    if subprocess.run(as_job([ANA, "--version"]), capture_output=True).returncode != 0:
        print(f"SKIP unprivileged pass: uid {JOB_UID} cannot run {ANA} (a build under a private directory)")
        return
    root = tempfile.mkdtemp(prefix="wd-untrusted-user-")
    os.chmod(root, 0o755)
    os.chown(root, JOB_UID, JOB_UID)
    try:
        for plant in PLANTS:
            name = plant.__name__
            if name == "plant_other_owner":
                continue  # what every plant is here
            d = os.path.join(root, name)
            subprocess.run(as_job([GEN, d, "--ranks=4", "--scenario=not-entered", "--victim=3"]),
                           check=True, capture_output=True)
            os.chmod(d, 0o777)  # shared: the group writes here
            before = set(os.listdir(d))
            plant(d, root)
            for f in set(os.listdir(d)) - before:
                os.lchown(os.path.join(d, f), OTHER_UID, OTHER_UID)
            want = {"plant_fifo": "not a regular file", "plant_zero": "symbolic link",
                    "plant_outside_file": "symbolic link", "plant_outside_dir": None}.get(
                        name, f"owned by uid {OTHER_UID}")
            try:
                p = subprocess.run(as_job([ANA, d]), capture_output=True, timeout=60)
            except subprocess.TimeoutExpired:
                check(False, f"as a user, {name}: the analyzer did not end within 60 s")
                continue
            try:
                text = p.stdout.decode("utf-8")
            except UnicodeDecodeError:
                check(False, f"as a user, {name}: output is not valid UTF-8")
                continue
            ok, first = named_rank3(p.stdout)
            check(ok, f"as a user, {name}: rank 3 named ({first[:140]})")
            if want:
                check(want in text.split("files skipped", 1)[-1], f"as a user, {name}: skipped, '{want}'")
            if name == "plant_outside_dir":
                check("elsewhere" not in text and "node999" not in text, f"as a user, {name}: nothing read through the link")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def memory_budget(root):
    """The run's memory budget (--max-memory, default half the machine's memory, at most 8 GiB):
    a dump of the job's own whose parsed tree would pass it is cut, listed with its reason, and
    the job gets no verdict rather than "OK"; within the budget the hang is still named."""
    d = os.path.join(root, "budget")
    subprocess.run([GEN, d, "--ranks=4", "--scenario=healthy"], check=True, capture_output=True)
    name = one_real_dump(d)
    with open(os.path.join(d, name)) as f:
        doc = json.load(f)
    doc["padding"] = "x" * (16 << 20)  # a 16 MiB string: a tree larger than a 12 MiB budget
    with open(os.path.join(d, name), "w") as f:
        json.dump(doc, f)
    for jobs in ("1", "4"):  # alone, and in the parallel load (cut there, then alone again)
        rc, out, _ = analyze(d, "--max-memory=12", f"--jobs={jobs}")
        text = out.decode()
        first = text.splitlines()[0] if text else ""
        check(first.startswith("NO VERDICT") and "cut" in first,
              f"memory budget, jobs {jobs}: a cut dump gives no verdict, not OK ({first[:160]})")
        check("memory budget (12 MiB, --max-memory)" in text.split("files skipped", 1)[-1],
              f"memory budget, jobs {jobs}: the cut dump is listed with its reason")
    rc, out, _ = analyze(d, "--max-memory=64")
    check(out.decode().startswith("OK"), "memory budget: within 64 MiB the healthy set is OK")
    h = fresh(root, "budget-hang")
    # 8 MiB holds one of these trees, not four: the parallel load cuts some, parses them again
    # alone, and the verdict is whole.
    rc, out, err = analyze(h, "--max-memory=8", "--jobs=4")
    ok, first = named_rank3(out)
    check(ok, f"memory budget: within 8 MiB rank 3 is still named ({first[:160]})")
    check(b"memory budget" not in out + err, "memory budget: nothing cut for good at 8 MiB")
    rc, out, err = analyze(h, "--max-memory=lots")
    check(rc != 0 and b"--max-memory" in err, "memory budget: a malformed --max-memory is refused")


def time_bound(root):
    """The run's time (--deadline, default 600 s): reading stops at 90 % of it and what was not
    read is cut, never "OK"; a settle wait gives way to reading."""
    d = fresh(root, "deadline")
    t0 = time.monotonic()
    rc, out, err = analyze(d, "--settle=100,30", "--deadline=3")
    took = time.monotonic() - t0
    check(took < 5, f"deadline: a 3 s run with a 30 s settle wait ended after {took:.1f} s")
    check(rc > 0 and not out.startswith(b"OK") and b"not read within the run's time (--deadline 3 s)" in err,
          f"deadline: files not read in time are cut, not OK (rc {rc}, {err.decode()[-200:]})")
    rc, out, _ = analyze(d, "--deadline=0")
    check(named_rank3(out)[0], "deadline: --deadline=0 (no bound) still names rank 3")


def main():
    root = tempfile.mkdtemp(prefix="wd-untrusted-")
    try:
        for plant in PLANTS:
            name = plant.__name__
            d = fresh(root, name)
            want = plant(d, root)
            if want == "skip":
                continue
            try:
                rc, out, err = analyze(d)
            except subprocess.TimeoutExpired:
                check(False, f"{name}: the analyzer did not end within 60 s")
                continue
            try:
                out.decode("utf-8")
                err.decode("utf-8")
            except UnicodeDecodeError:
                check(False, f"{name}: output is not valid UTF-8")
                continue
            ok, first = named_rank3(out)
            check(ok, f"{name}: first line names rank 3 not entering ({first[:160]})")
            text = out.decode()
            if want:
                check(want in text.split("files skipped", 1)[-1], f"{name}: skipped with reason '{want}' in the report")
            if name == "plant_outside_dir":
                check("elsewhere" not in text and "node999" not in text, f"{name}: nothing read through the link")
            # JSON report valid UTF-8 JSON too
            rc, js, _ = analyze(d, "--json")
            try:
                json.loads(js.decode("utf-8"))
            except Exception as e:
                check(False, f"{name}: --json is not valid UTF-8 JSON ({e})")
        # Only a bound-cut file of the job's own, in a healthy set: never "OK".
        d = os.path.join(root, "healthy-cut")
        subprocess.run([GEN, d, "--ranks=4", "--scenario=healthy"], check=True, capture_output=True)
        plant_bomb(d, root)
        rc, out, _ = analyze(d)
        first = out.decode().splitlines()[0]
        check(first.startswith("NO VERDICT") and "cut" in first,
              f"healthy set with a file cut by a bound: not OK ({first[:160]})")
        memory_budget(root)
        time_bound(root)
        unprivileged_pass()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish("check_untrusted")


if __name__ == "__main__":
    sys.exit(main())
