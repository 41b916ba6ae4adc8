"""`blazar import / ls / cp / rm / show` as a user runs them, on a real SQLite file and the real GGUF."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_daemon


def test_catalog_commands(tmp_path: Path, model_file: Path) -> None:
    d = make_daemon(tmp_path)
    assert "no models" in d.cli("ls").stdout
    out = d.cli("import", str(model_file)).stdout
    assert "imported smollm2-135m-instruct:q4_1" in out
    d.cli("cp", "smollm2-135m-instruct:q4_1", "smol")
    listing = d.cli("ls").stdout
    assert "smol:latest" in listing and "smollm2-135m-instruct:q4_1" in listing and "Q4_1" in listing
    shown = d.cli("show", "smol").stdout
    for needle in (
        "architecture      llama",
        "context length    8192",
        "quantization      Q4_1",
        "chat template     yes",
    ):
        assert needle in shown, shown
    assert "134.52M" in shown
    assert "serving lane      unavailable: no llama-cpp engine is installed" in shown
    d.cli("rm", "smol")
    assert "smol:latest" not in d.cli("ls").stdout


def test_show_a_file_directly(tmp_path: Path, model_file: Path) -> None:
    shown = make_daemon(tmp_path).cli("show", str(model_file)).stdout
    assert "architecture      llama" in shown and "serving lane" not in shown


def test_errors_are_one_line(tmp_path: Path, model_file: Path) -> None:
    d = make_daemon(tmp_path)
    for args, needle in [
        (("show", "ghost"), "model 'ghost:latest' not found"),
        (("rm", "ghost"), "model 'ghost:latest' not found"),
        (("import", str(tmp_path / "nope.gguf")), "does not exist"),
        (("import", str(model_file), "--name", "bad name"), "invalid model name"),
    ]:
        r = d.cli(*args, check=False)
        assert r.returncode == 1, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, "prot = 1\n")
    r = d.cli("ls", check=False)
    assert r.returncode == 1 and "unknown key 'prot'" in r.stderr and "did you mean 'port'" in r.stderr
