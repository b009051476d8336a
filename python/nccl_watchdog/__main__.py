"""``python -m nccl_watchdog``: the installed plugin's path, a job's environment, the analyzer
and the status command, and a check of what this machine lacks.

    python -m nccl_watchdog plugin-path            # for NCCL_PROFILER_PLUGIN=$(...)
    python -m nccl_watchdog env --dump-dir DIR [--timeout 5m] [--shell sh|fish|json]
    python -m nccl_watchdog analyze DUMP_DIR...    # nccl-watchdog-analyze, its options as they are
    python -m nccl_watchdog status [DIR...]        # nccl-watchdog-status
    python -m nccl_watchdog check                  # can this machine run it? (exit 1 when not)
    python -m nccl_watchdog --version
"""
import argparse
import ctypes
import ctypes.util
import glob
import json
import os
import shlex
import subprocess
import sys

import nccl_watchdog as nw


def _die(msg, code=1):
    print(msg, file=sys.stderr)
    return code


def _glibc():
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "unknown").replace("glibc ", "")
    except (ValueError, OSError):
        return "unknown (not glibc?)"


def _built_for():
    """The glibc the wheel was built for, from the tag recorded at build time."""
    tag = getattr(nw._version, "__platform__", "")
    if tag.startswith("manylinux_"):
        parts = tag.split("_")
        return f"glibc {parts[1]}.{parts[2]} or newer ({tag})"
    return tag or "unknown"


def _load_problem(path):
    """Why the dynamic loader refuses a file here, or None. Loading the plugin runs no code of
    ours beyond constructors that do nothing until NCCL calls init."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_LOCAL | getattr(os, "RTLD_LAZY", 1))
        return None
    except OSError as e:
        return str(e)


def _plugin_or_explain():
    try:
        path = nw.plugin_path()
    except nw.NotInstalledError as e:
        return None, str(e)
    problem = _load_problem(path)
    if problem:
        return None, (f"nccl-watchdog: the plugin cannot be loaded on this machine: {problem}\n"
                      f"  this machine has glibc {_glibc()}; the wheel needs {_built_for()}")
    return path, None


def _find_nccl():
    """Where NCCL is, as NCCL's own loader would find it: the nvidia-nccl wheel PyTorch depends
    on, then the system's library path. (path, version) or (None, None)."""
    cands = []
    for sp in sys.path:
        cands += glob.glob(os.path.join(sp, "nvidia", "nccl", "lib", "libnccl.so*"))
    found = ctypes.util.find_library("nccl")
    if found:
        cands.append(found)
    for c in cands:
        try:
            lib = ctypes.CDLL(c, mode=os.RTLD_LOCAL)
        except OSError:
            continue
        v = ctypes.c_int(0)
        try:
            lib.ncclGetVersion(ctypes.byref(v))
            code = v.value
            major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
            minor, patch = rest // 100, rest % 100
            return c, f"{major}.{minor}.{patch}"
        except (AttributeError, OSError):
            return c, "unknown"
    return None, None


def cmd_plugin_path(_args):
    path, err = _plugin_or_explain()
    if err:
        return _die(err)
    print(path)
    return 0


def cmd_env(args):
    path, err = _plugin_or_explain()
    if err:
        return _die(err)
    e = nw.env(dump_dir=args.dump_dir, timeout=args.timeout)
    e["NCCL_PROFILER_PLUGIN"] = path
    if args.shell == "json":
        print(json.dumps(e, indent=2))
    else:
        for k, v in e.items():
            print(f"set -gx {k} {shlex.quote(v)}" if args.shell == "fish" else f"export {k}={shlex.quote(v)}")
    if args.dump_dir is None:
        print("# no --dump-dir: dumps go to ./nccl-watchdog-<job id> of each rank; give a directory "
              "every rank shares", file=sys.stderr)
    return 0


def _exec(binary_fn, argv):
    try:
        binary = binary_fn()
    except nw.NotInstalledError as e:
        return _die(str(e))
    problem = None
    try:
        os.execv(binary, [os.path.basename(binary), *argv])
    except OSError as e:
        problem = str(e)
    return _die(f"nccl-watchdog: cannot run {binary}: {problem}")


def cmd_check(_args):
    ok = True
    print(f"nccl-watchdog {nw.__version__}, built for {_built_for()}; this machine: glibc {_glibc()}")
    path, err = _plugin_or_explain()
    if err:
        ok = False
        print(err)
    else:
        print(f"plugin: {path}: loads")
    for name, fn in (("analyzer", nw.analyzer_path), ("status", nw.status_path)):
        try:
            b = fn()
            r = subprocess.run([b, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
            line = r.stdout.decode(errors="replace").strip().splitlines()
            if r.returncode:
                ok = False
                print(f"{name}: {b}: does not run here: {line[-1] if line else r.returncode}")
            else:
                print(f"{name}: {b}: {line[0] if line else 'ok'}")
        except nw.NotInstalledError as e:
            ok = False
            print(e)
    nccl, ver = _find_nccl()
    if nccl:
        print(f"NCCL: {nccl} (version {ver}): the plugin serves NCCL 2.27 to 2.32 (profiler ABI v4-v7)")
    else:
        print("NCCL: not found in this environment (no nvidia-nccl wheel, no libnccl.so on the library "
              "path): the plugin does nothing until a process loads NCCL (PyTorch brings it as "
              "nvidia-nccl-cu12/cu13)")
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m nccl_watchdog",
                                description="nccl-watchdog: an NCCL profiler plugin that names the rank that hung a job.")
    p.add_argument("--version", action="version", version=f"nccl-watchdog {nw.__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.add_parser("plugin-path", help="the plugin's full path, for NCCL_PROFILER_PLUGIN")
    e = sub.add_parser("env", help="the exports a job script needs")
    e.add_argument("--dump-dir", help="the directory every rank dumps into (shared file system)")
    e.add_argument("--timeout", help='stall timeout, e.g. "5m" (default 300s)')
    e.add_argument("--shell", choices=["sh", "fish", "json"], default="sh")
    sub.add_parser("analyze", help="run nccl-watchdog-analyze (its options as they are)", add_help=False)
    sub.add_parser("status", help="run nccl-watchdog-status", add_help=False)
    sub.add_parser("check", help="what this machine lacks to run the plugin")
    argv = sys.argv[1:] if argv is None else argv
    # analyze and status pass everything after them to the binaries, --help included.
    if argv and argv[0] in ("analyze", "status"):
        return _exec(nw.analyzer_path if argv[0] == "analyze" else nw.status_path, argv[1:])
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help()
        return 2
    return {"plugin-path": cmd_plugin_path, "env": cmd_env, "check": cmd_check}[args.cmd](args)


def analyze_main():
    return _exec(nw.analyzer_path, sys.argv[1:])


def status_main():
    return _exec(nw.status_path, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
