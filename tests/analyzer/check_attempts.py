#!/usr/bin/env python3
"""One verdict per attempt: a job torchrun's agent (or Slurm's requeue) restarted shares its dump
directory with the attempt before. Attempt 0 hung on rank 3 and was restarted; attempt 1 (new
pids, a new communicator: a new unique id) hangs on rank 1, or is healthy and snapshotted. The
analyzer must judge the latest attempt, say so on its first line, set the older attempt's dumps
aside, and judge attempt 0 when asked (--attempt=0). Two containers with one host name and one
pid must not be merged.

usage: check_attempts.py GEN_DUMPS ANALYZER
"""
import json, os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wd_check import check, finish  # noqa: E402

GEN, ANA = sys.argv[1], sys.argv[2]


def gen(d, scenario, victim=None):
    args = [GEN, d, "--ranks=4", f"--scenario={scenario}"]
    if victim is not None:
        args.append(f"--victim={victim}")
    subprocess.run(args, check=True, capture_output=True)


def stamp(d, attempt_env, pid_add=0, comm_xor=0, reason=None, boot=None, start=None):
    """give every dump of d an identity (as the plugin writes it) and optionally new pids/comm ids"""
    for f in os.listdir(d):
        p = os.path.join(d, f)
        if not f.endswith(".json"):
            if f.endswith(".trigger"):
                os.unlink(p)
            continue
        doc = json.load(open(p))
        ident = {"job": "4242", "episodes": 1}
        ident.update(attempt_env)
        if boot:
            ident["bootId"] = boot
        if start:
            ident["processStartNs"] = start
        # Where the plugin writes it (render.c): right after "time", in the file's first bytes.
        doc = {k: v for k, v in doc.items() if k != "identity"}
        at = list(doc).index("time") + 1 if "time" in doc else len(doc)
        items = list(doc.items())
        doc = dict(items[:at] + [("identity", ident)] + items[at:])
        doc["pid"] = doc["pid"] + pid_add
        if reason:
            doc["reason"] = reason
        for c in doc.get("comms", []):
            c["commId"] = "0x%016x" % (int(c["commId"], 16) ^ comm_xor)
        os.unlink(p)
        base = f.split("-", 2)
        json.dump(doc, open(os.path.join(d, f"{base[0]}-{doc['pid']}-{base[2]}"), "w"))


def first_line(*args):
    p = subprocess.run([ANA, *args], capture_output=True, text=True, timeout=120)
    return (p.stdout.splitlines() or [""])[0]


def as_kind(name, kind):
    """a dump's file name as the plugin (or the salvage) would give it for that kind"""
    base, dash, _ = name[: -len(".json")].rpartition("-")
    return f"{base}-{kind}.json" if dash else name


def merged(dst, *srcs):
    os.makedirs(dst)
    for s in srcs:
        for f in os.listdir(s):
            shutil.copy2(os.path.join(s, f), os.path.join(dst, f))  # with its file time


def written(d, ago):
    """the files of d as written `ago` seconds ago on the file system's clock (mtime): an earlier
    incarnation's were written before the next began; processes that ran at once, together"""
    t = time.time() - ago
    for f in os.listdir(d):
        os.utime(os.path.join(d, f), (t, t))


def main():
    root = tempfile.mkdtemp(prefix="wd-attempts-")
    try:
        a0, a1, a1h = (os.path.join(root, x) for x in ("a0", "a1", "a1h"))
        gen(a0, "not-entered", 3)
        stamp(a0, {"torchelasticRestartCount": 0})
        gen(a1, "not-entered", 1)
        stamp(a1, {"torchelasticRestartCount": 1}, pid_add=1000, comm_xor=0xff)
        gen(a1h, "healthy")
        stamp(a1h, {"torchelasticRestartCount": 1}, pid_add=1000, comm_xor=0xff, reason="signal")
        written(a0, 600)
        written(a1, 60)
        written(a1h, 60)

        d = os.path.join(root, "restart-hang")
        merged(d, a0, a1)
        line = first_line(d)
        check(line.startswith("HANG") and "rank 1 never entered" in line and "incarnation 1 of 2" in line
              and "TORCHELASTIC_RESTART_COUNT=1" in line and "set aside 4 dumps" in line,
              f"restart: the latest incarnation's culprit, incarnation said ({line[:260]})")
        line0 = first_line("--attempt=0", d)
        check("rank 3 never entered" in line0 and "incarnation 0 of 2" in line0, f"--attempt=0 judges the first ({line0[:200]})")
        line0 = first_line("--incarnation=0", d)
        check("rank 3 never entered" in line0 and "incarnation 0 of 2" in line0,
              f"--incarnation=0 judges the first ({line0[:200]})")
        # Launcher counters label an incarnation, they do not define it: with no counter at all
        # (an in-process restart changes none), the new communicators still tell the two apart.
        n0, n1 = os.path.join(root, "n0"), os.path.join(root, "n1")
        gen(n0, "not-entered", 3)
        stamp(n0, {})
        gen(n1, "not-entered", 1)
        stamp(n1, {}, comm_xor=0x3c)  # the same pids: restarted in-process
        written(n0, 600)
        written(n1, 60)
        d = os.path.join(root, "inprocess")
        merged(d, n0, n1)
        line = first_line(d)
        check(line.startswith("HANG") and "rank 1 never entered" in line and "incarnation 1 of 2" in line,
              f"in-process restart (no counter, the same pids): the newest communicators judged ({line[:220]})")

        d = os.path.join(root, "restart-healthy")
        merged(d, a0, a1h)
        line = first_line(d)
        check(line.startswith("OK") and "incarnation 1 of 2" in line, f"a healthy live incarnation after a hung one reads OK ({line[:200]})")

        # Slurm's requeue: SLURM_RESTART_COUNT orders attempts before torchelastic's count.
        s0, s1 = os.path.join(root, "s0"), os.path.join(root, "s1")
        gen(s0, "not-entered", 2)
        stamp(s0, {"slurmRestartCount": 0, "torchelasticRestartCount": 3})
        gen(s1, "not-entered", 0)
        stamp(s1, {"slurmRestartCount": 1, "torchelasticRestartCount": 0}, pid_add=2000, comm_xor=0xf0)
        written(s0, 600)
        written(s1, 60)
        d = os.path.join(root, "requeue")
        merged(d, s0, s1)
        line = first_line(d)
        check("rank 0 never entered" in line and "SLURM_RESTART_COUNT=1" in line, f"requeue: Slurm's count first ({line[:200]})")

        # Two episodes of one attempt (the same processes): by default each process's newest dump
        # (episode 2, rank 1 hung); --episode=1 judges the first (rank 2), and says so.
        e1, e2 = os.path.join(root, "e1"), os.path.join(root, "e2")
        gen(e1, "not-entered", 2)
        stamp(e1, {"torchelasticRestartCount": 0, "jobEpisode": 1})
        gen(e2, "not-entered", 1)
        stamp(e2, {"torchelasticRestartCount": 0, "jobEpisode": 2})
        for f in os.listdir(e2):
            os.rename(os.path.join(e2, f), os.path.join(e2, f.replace("-0001-", "-0002-")))
        d = os.path.join(root, "episodes")
        merged(d, e1, e2)
        line = first_line(d)
        check("rank 1 never entered" in line, f"two episodes: the newest judged by default ({line[:160]})")
        line = first_line("--episode=1", d)
        check("rank 2 never entered" in line and "episode 1" in line, f"--episode=1 judges the first ({line[:200]})")
        p = subprocess.run([ANA, "--episode=7", d], capture_output=True, text=True, timeout=120)
        check(p.returncode == 3 and not p.stdout.startswith("OK"), "--episode of no dump: no verdict, not OK")

        # The automatic verdict's --episode=K (src/watchdog/autoverdict.c): K's dumps and what a
        # process left as it ended; never a snapshot, which shows a moment before the hang.
        # Episode 2 with rank 1's dump taken out: its healthy snapshot stands in by default, never
        # with --episode=2; a post-mortem dump of rank 1 (its ring file's) counts with --episode=2.
        hs = os.path.join(root, "hs")
        gen(hs, "healthy")
        stamp(hs, {"torchelasticRestartCount": 0}, reason="signal")
        for name, extra in (("snap", None), ("pm", "postmortem")):
            d = os.path.join(root, "episode-" + name)
            merged(d, e2)
            for f in sorted(os.listdir(d)):
                p1 = os.path.join(d, f)
                if f.endswith(".json") and json.load(open(p1))["comms"][0]["rank"] == 1:
                    os.unlink(p1)
            for f in sorted(os.listdir(hs)):
                doc = json.load(open(os.path.join(hs, f)))
                if f.endswith(".json") and doc["comms"][0]["rank"] == 1:
                    out = f.replace("-0001-", "-0000-")
                    if extra:
                        doc["reason"] = extra
                        out = as_kind(out, extra)
                    json.dump(doc, open(os.path.join(d, out), "w"))
            dflt, ep = first_line(d), first_line("--episode=2", d)
            if name == "snap":
                check("rank 1 never entered" in dflt, f"by default rank 1's snapshot stands in ({dflt[:160]})")
                check("rank 1 left no dump" in ep and "set aside 1 dump of other episodes and snapshots" in ep,
                      f"--episode=2 sets the snapshot aside ({ep[:120]} ... {ep[-80:]})")
                # A file the plugin would name as a snapshot is not even read with --episode (a
                # job's directory may hold hundreds; reading them was most of a verdict's time):
                # counted among those set aside. By default it is read (here: not a dump).
                with open(os.path.join(d, "host-9-0009-signal.json"), "w") as f:
                    f.write("not a dump")
                p = subprocess.run([ANA, "--episode=2", d], capture_output=True, text=True, timeout=120)
                ep = (p.stdout.splitlines() or [""])[0]
                check("signal.json" not in p.stderr and "set aside 2 dumps of other episodes and snapshots" in ep,
                      f"--episode=2 reads no snapshot-named file ({p.stderr.strip()[:160]!r}; {ep[-80:]})")
                p = subprocess.run([ANA, d], capture_output=True, text=True, timeout=120)
                check("host-9-0009-signal.json" in p.stderr, f"by default it is read ({p.stderr.strip()[:160]!r})")
                os.unlink(os.path.join(d, "host-9-0009-signal.json"))
            else:
                check("rank 1 never entered" in ep and "set aside 0 dumps" in ep,
                      f"--episode=2 keeps rank 1's post-mortem dump ({ep[:120]} ... {ep[-80:]})")
        # An episode the job saw resume (the plugin's verdict-K.resumed, autoverdict.c): its
        # verdict is of that moment, and the first line says so before anything else; a link
        # planted under that name (the directory is shared) says nothing.
        d = os.path.join(root, "episodes")
        rp = os.path.join(d, "verdict-2.resumed")
        os.symlink(os.path.join(root, "nowhere"), rp)
        with open(os.path.join(root, "nowhere"), "w") as f:
            f.write("stall episode 2 resumed after 9.9 s (planted)\n")
        line = first_line(d)
        check(line.startswith("HANG") and "planted" not in line, f"a linked verdict-2.resumed is not read ({line[:120]})")
        os.unlink(rp)
        with open(rp, "w") as f:
            f.write("stall episode 2 resumed after 2.4 s (host node000, pid 10000)\n")
        line = first_line(d)
        check(line.startswith("RESUMED: stall episode 2 resumed after 2.4 s") and "at that moment: HANG" in line,
              f"the latest episode resumed: said first ({line[:160]})")
        line = first_line("--episode=1", d)
        check(line.startswith("HANG") and "episode 1" in line, f"episode 1 did not resume ({line[:120]})")
        os.unlink(rp)

        # Its settle counts episode K's answers only: the dumps of earlier episodes (and any
        # snapshot) written within the window must not end the wait before K's are in.
        d = os.path.join(root, "episodes")
        p = subprocess.run([ANA, "-q", "--settle=5,1.5,0", "--episode=2", d], capture_output=True, text=True, timeout=120)
        check("4 of 5 dumps" in p.stderr, f"--settle with --episode=2 counts episode 2's 4 dumps ({p.stderr.strip()[:120]})")
        p = subprocess.run([ANA, "-q", "--settle=5,1.5,0", d], capture_output=True, text=True, timeout=120)
        check("8 of 5 dumps" in p.stderr, f"--settle alone counts every dump ({p.stderr.strip()[:120]})")
        # A node's copy of a running process's ring file, made when its watchdog did not answer
        # (<host>-<pid>-e<K>-live.json, autoverdict.c): it counts for its process only where that
        # process has no answer of its own (a watchdog merely late: never one process twice).
        ans = sorted(f for f in os.listdir(d) if f.endswith(".json") and "-0002-" in f)[0]
        host, pid = ans.split("-")[0], ans.split("-")[1]
        doc = json.load(open(os.path.join(d, ans)))
        doc["reason"] = "live"
        # A process that died with two communicators leaves two post-mortem dumps (the salvage
        # writes one per ring file): one process, counted once.
        copies = [os.path.join(d, f"{host}-{pid}-e2-live.json"), os.path.join(d, f"{host}-99999-e2-live.json"),
                  os.path.join(d, f"{host}-99998-e1-live.json"), os.path.join(d, f"{host}-99997-0xaaa-postmortem.json"),
                  os.path.join(d, f"{host}-99997-0xbbb-postmortem.json"),
                  os.path.join(d, f"{host}x-99997-0xbbb-postmortem.json")]  # another host, the same pid
        for c in copies:
            json.dump(doc, open(c, "w"))
        p = subprocess.run([ANA, "-q", "--settle=8,1.5,0", "--episode=2", d], capture_output=True, text=True, timeout=120)
        check("7 of 8 dumps" in p.stderr,
              f"--settle counts processes: a copy for one without an answer, of its episode only; one dead process "
              f"once, another host's of the same pid apart ({p.stderr.strip()[:120]})")
        # A salvage under way (the node's poller's salvage-<K>-<host>-<pid>.pending, autoverdict.c,
        # av_salvage) lists the processes it writes: one of them is not counted until the mark is
        # gone, so its first communicator's dump does not end the settle before its second.
        mark = os.path.join(d, "salvage-2-node000-4242.pending")
        with open(mark, "w") as f:
            f.write(f"{host}-99997\n")
        t0 = time.monotonic()
        p = subprocess.Popen([ANA, "-q", "--settle=7,30,0", "--episode=2", d], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        os.unlink(mark)
        err = p.communicate(timeout=120)[1]
        took = time.monotonic() - t0
        check("7 of 7 dumps" in err and took >= 1.4,
              f"--settle holds a process its salvage mark lists until the mark goes ({took:.1f} s: {err.strip()[:120]})")
        with open(mark, "w") as f:  # a mark left by a node torn down mid-salvage, listing nobody
            pass
        t0 = time.monotonic()
        p = subprocess.run([ANA, "-q", "--settle=7,30,0", "--episode=2", d], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
        check("7 of 7 dumps" in p.stderr and took < 10,
              f"an empty salvage mark holds nobody ({took:.1f} s: {p.stderr.strip()[:120]})")
        with open(mark, "w") as f:  # more processes than the settle holds: said, never silent
            f.write("".join(f"gone-{90000 + i}\n" for i in range(70)))
        p = subprocess.run([ANA, "-q", "--settle=7,30,0", "--episode=2", d], capture_output=True, text=True, timeout=120)
        check("7 of 7 dumps" in p.stderr and "over 64 processes under salvage" in p.stderr,
              f"a mark past the settle's 64 held processes says so ({p.stderr.strip()[:160]})")
        os.unlink(mark)
        # A settle pass reads an answer's head once (settle.c, settle_cache): dumps never change
        # once written, so later passes stat them and read nothing. The analyzer's read bytes
        # (/proc/<pid>/io rchar) between 1.2 s and 3.2 s of a settle that cannot end: 4 passes.
        heads = 0
        for f in os.listdir(d):
            if f.endswith(".json") and not f.startswith("verdict-"):
                heads += min(os.path.getsize(os.path.join(d, f)), 4095)
        p = subprocess.Popen([ANA, "-q", "--settle=99,5,0", "--episode=2", d], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)

        def rchar():
            with open(f"/proc/{p.pid}/io") as fh:
                return int(next(x for x in fh if x.startswith("rchar:")).split()[1])
        time.sleep(1.2)
        r0 = rchar()
        time.sleep(2.0)
        r1 = rchar()
        p.wait(timeout=120)
        check(heads > 4096 and r1 - r0 < 4096,
              f"a settle reads each dump's head once, not every pass ({r1 - r0} bytes read in 4 passes; "
              f"{heads} bytes in one pass's heads)")
        for c in copies:
            os.unlink(c)
        # Only episode 1's dumps and snapshots: nothing of episode 2, no verdict; post-mortem
        # dumps beside them (processes that died; an episode posted on SIGABRT is answered by
        # teardown dumps alike) are judged alone.
        pm = os.path.join(root, "pm-only")
        merged(pm, e1)
        for f in os.listdir(hs):
            doc = json.load(open(os.path.join(hs, f)))
            json.dump(doc, open(os.path.join(pm, f.replace("-0001-", "-0009-")), "w"))
        p = subprocess.run([ANA, "--episode=2", pm], capture_output=True, text=True, timeout=120)
        check(p.returncode == 3 and not p.stdout, f"--episode=2 with episode 1's dumps and snapshots only: no verdict (rc {p.returncode}, {p.stdout[:120]})")
        for f in os.listdir(pm):
            if "-0009-" in f:
                doc = json.load(open(os.path.join(pm, f)))
                doc["reason"] = "postmortem"
                os.unlink(os.path.join(pm, f))
                json.dump(doc, open(os.path.join(pm, as_kind(f, "postmortem")), "w"))
        line = first_line("--episode=2", pm)
        check(line.startswith("OK") and "set aside 4 dumps" in line,
              f"--episode=2 with post-mortem dumps: judged from them alone ({line[:80]} ... {line[-90:]})")

        # One host name, one pid, two machines (containers): two processes, not one.
        c0, c1 = os.path.join(root, "c0"), os.path.join(root, "c1")
        gen(c0, "not-entered", 3)
        stamp(c0, {}, boot="boot-a", start="0x10")
        gen(c1, "not-entered", 3)
        stamp(c1, {}, boot="boot-b", start="0x10", comm_xor=0x0f)
        # Same host folder, same pid: the second writer's O_EXCL gives it the next sequence.
        for f in os.listdir(c1):
            os.rename(os.path.join(c1, f), os.path.join(c1, f.replace("-0001-", "-0002-")))
        written(c0, 60)  # one job: they ran at once
        written(c1, 60)
        d = os.path.join(root, "containers")
        merged(d, c0, c1)
        p = subprocess.run([ANA, "--json", d], capture_output=True, text=True, timeout=120)
        rep = json.loads(p.stdout)
        check(rep.get("dumpsUsed") == 8, f"same host and pid on two machines: 8 dumps used, got {rep.get('dumpsUsed')}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return finish("check_attempts")


if __name__ == "__main__":
    sys.exit(main())
