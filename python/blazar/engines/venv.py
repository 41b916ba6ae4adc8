"""Venv lanes (SGLang, mlx-lm): ``requirement==version`` pip-installed into ``<tag>/venv`` behind a launcher.

The launcher is a small shell script named after the lane's binary (``sglang-server``, ``mlx-lm-server``) beside
the venv: ``--version`` prints the installed distribution's version; ``--blazar-api-key-file FILE FLAG ARGS...``
runs the module with ``ARGS... FLAG KEY``, the key read from FILE inside Python, so it never appears on a command
line (``/proc/PID/cmdline`` is readable by every local user); anything else runs ``venv/bin/python -m MODULE
ARGS...``. It finds the venv relative to itself, so the tag dir can be moved. This module owns creating the venv,
the pip call and the launcher text; it never downloads except through pip.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from blazar.engines.manifest import VenvSpec
from blazar.errors import EngineError

PIP_TIMEOUT_SECS = 3600
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

KEY_FILE_FLAG = "--blazar-api-key-file"
"""The launcher's first argument that makes it read the engine's API key from a file (see the module doc)."""

_KEY_SHIM = (
    "import runpy, sys; path, flag = sys.argv[1:3]; key = open(path).read().strip(); "
    "sys.argv = [sys.argv[0], *sys.argv[3:], flag, key]; "
    'runpy.run_module("{module}", run_name="__main__", alter_sys=True)'
)


def launcher_text(spec: VenvSpec) -> str:
    for what, value in (("distribution", spec.distribution), ("module", spec.module)):
        if not _NAME.fullmatch(value):
            raise EngineError(f"the engine manifest's venv {what} '{value}' is not a plain name")
    return (
        "#!/bin/sh\n"
        f"# Blazar launcher: {spec.requirement} in the venv beside this file.\n"
        'here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)\n'
        'if [ "$1" = "--version" ]; then\n'
        '  exec "$here/venv/bin/python" -c '
        "'import importlib.metadata as m, sys; print(sys.argv[1], \"version\", m.version(sys.argv[1]))' "
        f"{spec.distribution}\n"
        "fi\n"
        f'if [ "$1" = "{KEY_FILE_FLAG}" ]; then\n'
        "  key_file=$2 key_flag=$3\n"
        "  shift 3\n"
        f"  exec \"$here/venv/bin/python\" -c '{_KEY_SHIM.format(module=spec.module)}' "
        '"$key_file" "$key_flag" "$@"\n'
        "fi\n"
        f'exec "$here/venv/bin/python" -m {spec.module} "$@"\n'
    )


def reads_key_file(launcher: Path) -> bool:
    """Whether ``launcher`` is a Blazar launcher that takes ``KEY_FILE_FLAG`` (launchers written before it do not;
    a binary registered with ``engine add`` is not a launcher at all)."""
    try:
        with launcher.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!/bin/sh\n# Blazar launcher:") and KEY_FILE_FLAG.encode() in head


def launched_argv(tag_dir: Path, spec: VenvSpec, args: list[str]) -> list[str]:
    """What the launcher in ``tag_dir`` runs for ``args`` (the compiled command line, for checks and docs)."""
    return [str(tag_dir / "venv" / "bin" / "python"), "-m", spec.module, *args]


def _run(argv: list[str], log: Path, what: str) -> None:
    with log.open("ab") as lf:
        lf.write(("$ " + " ".join(argv) + "\n").encode())
        lf.flush()
        try:
            rc = subprocess.run(
                argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=PIP_TIMEOUT_SECS
            ).returncode
        except (OSError, subprocess.TimeoutExpired) as e:
            raise EngineError(f"{what} failed: {e}") from None
    if rc != 0:
        tail = log.read_bytes()[-1500:].decode("utf-8", errors="replace").strip()
        raise EngineError(f"{what} failed (exit {rc}); the last lines of its log:\n{tail}")


def create(tag_dir: Path, spec: VenvSpec, version: str, binary: str) -> Path:
    """Create ``tag_dir/venv``, pip-install the pinned requirement and write the launcher; returns the launcher."""
    if not _NAME.fullmatch(binary):
        raise EngineError(f"the engine manifest's binary name '{binary}' is not a plain file name")
    launcher_body = launcher_text(spec)
    log = tag_dir / "install.log"
    venv = tag_dir / "venv"
    python = str(venv / "bin" / "python")
    if importlib.util.find_spec("pip") is not None:
        # Blazar's own pip drives the new venv (pip --python): no ensurepip copy, which is slow and unused after.
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log, "creating the venv")
        pip = [sys.executable, "-m", "pip", "--python", python]
    else:
        _run([sys.executable, "-m", "venv", str(venv)], log, "creating the venv")
        pip = [python, "-m", "pip"]
    pip += ["install", "--disable-pip-version-check", "--no-input"]
    _run(
        [*pip, *spec.pip_args, f"{spec.requirement}=={version}"],
        log,
        f"pip install {spec.requirement}=={version}",
    )
    launcher = tag_dir / binary
    launcher.write_text(launcher_body)
    launcher.chmod(0o755)
    return launcher
