"""nccl-watchdog for Python jobs: where the installed plugin is, the environment a job needs, and
the analyzer's verdict as a dict.

The plugin itself is C (an NCCL profiler plugin loaded by NCCL through ``NCCL_PROFILER_PLUGIN``);
this package carries it with ``nccl-watchdog-analyze`` and ``nccl-watchdog-status``, and does no
analysis of its own: :func:`verdict` runs the installed analyzer and returns its JSON report.

In a job script::

    import os, nccl_watchdog
    os.environ.update(nccl_watchdog.env(dump_dir="/shared/dumps/job42", timeout="5m"))
    # ... then import torch and create the process group: NCCL loads the plugin at its first init

After a hang, in a notebook::

    v = nccl_watchdog.verdict("/shared/dumps/job42")
    v["job"]["line"]              # the first line: which rank, doing what, hung the job
"""
import gzip
import json
import os
import subprocess

from ._version import __version__

__all__ = ["__version__", "NotInstalledError", "plugin_path", "analyzer_path", "status_path",
           "env", "verdict", "read_dump"]

_HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_NAME = "libnccl-profiler-watchdog.so"


class NotInstalledError(RuntimeError):
    """A file this installation should hold is missing (a broken or partial install)."""


def _installed(kind, name):
    path = os.path.join(_HERE, kind, name)
    if not os.path.exists(path):
        raise NotInstalledError(
            f"nccl-watchdog: {name} is missing from this installation (expected {path}); "
            "reinstall the wheel: pip install --force-reinstall nccl-watchdog")
    return path


def plugin_path():
    """The plugin's full path, for ``NCCL_PROFILER_PLUGIN``."""
    return _installed("lib", PLUGIN_NAME)


def analyzer_path():
    """The installed ``nccl-watchdog-analyze``."""
    return _installed("bin", "nccl-watchdog-analyze")


def status_path():
    """The installed ``nccl-watchdog-status``."""
    return _installed("bin", "nccl-watchdog-status")


def env(dump_dir=None, timeout=None, **settings):
    """The environment variables a job needs, as a dict (``os.environ.update`` it before NCCL's
    first communicator is created): ``NCCL_PROFILER_PLUGIN`` and, when given, the dump
    directory (shared by every rank) and the stall timeout ("5m", "300s"). Other settings are
    passed by their short name: ``env(dump_dir=d, metrics="30s")`` sets
    ``NCCL_WATCHDOG_METRICS`` (docs/configuration.md)."""
    e = {"NCCL_PROFILER_PLUGIN": plugin_path()}
    if dump_dir is not None:
        e["NCCL_WATCHDOG_DUMP_DIR"] = os.path.abspath(os.fspath(dump_dir))
    if timeout is not None:
        e["NCCL_WATCHDOG_TIMEOUT"] = str(timeout)
    for k, v in settings.items():
        e["NCCL_WATCHDOG_" + k.upper()] = str(v)
    return e


def verdict(*paths, extra_args=(), timeout=600):
    """Run the installed analyzer on dump directories (or dump and ring files) and return its
    JSON report as a dict (schema: docs/analyzer.md). Raises RuntimeError with the analyzer's
    own message when it read no dump or failed."""
    if not paths:
        raise ValueError("verdict: give at least one dump directory")
    cmd = [analyzer_path(), "--json", "--quiet", *extra_args, *[os.fspath(p) for p in paths]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)
    if r.returncode != 0:
        msg = r.stderr.decode(errors="replace").strip() or f"exit status {r.returncode}"
        raise RuntimeError(f"nccl-watchdog-analyze: {msg}")
    return json.loads(r.stdout)


def read_dump(path):
    """One dump file (``*.json`` or ``*.json.gz``, as the plugin writes them) as a dict
    (docs/dump-format.md)."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)
