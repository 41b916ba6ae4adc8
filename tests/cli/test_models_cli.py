"""`blazar import / ls / cp / rm / show` as a user runs them, on a real SQLite file and the real GGUF."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw

from tests.conftest import make_daemon
from tests.fakehub import write_model_dir


def test_catalog_commands(tmp_path: Path, model_file: Path) -> None:
    d = make_daemon(tmp_path)
    assert "no models" in d.cli("ls").stdout
    out = d.cli("import", str(model_file)).stdout
    assert "imported smollm2-135m-instruct:q4_1" in out
    d.cli("cp", "smollm2-135m-instruct:q4_1", "smol")
    listing = d.cli("ls").stdout
    assert "smol:latest" in listing and "smollm2-135m-instruct:q4_1" in listing and "Q4_1" in listing
    short = hashlib.sha256(model_file.read_bytes()).hexdigest()[:12]
    header, *rows = listing.splitlines()
    assert header.split() == ["NAME", "DIGEST", "SIZE", "PARAMS", "QUANT", "ARCH"]
    assert [r.split()[:2] for r in rows] == [["smol:latest", short], ["smollm2-135m-instruct:q4_1", short]]
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


def test_ls_fills_digests_missing_from_an_older_database(tmp_path: Path, model_file: Path) -> None:
    d = make_daemon(tmp_path)
    d.cli("import", str(model_file), "--name", "smol")
    conn = apsw.Connection(str(d.data_dir / "blazar.db"))
    conn.execute("UPDATE models SET sha256 = NULL")  # as a blazar from before digests left the row
    conn.close()
    first = d.cli("ls")
    short = hashlib.sha256(model_file.read_bytes()).hexdigest()[:12]
    assert first.stdout.splitlines()[1].split()[:2] == ["smol:latest", short]
    assert "computing the sha256 of 1 model(s)" in first.stderr
    again = d.cli("ls")
    assert again.stdout == first.stdout and again.stderr == ""  # stored the first time


def test_show_a_file_directly(tmp_path: Path, model_file: Path) -> None:
    shown = make_daemon(tmp_path).cli("show", str(model_file)).stdout
    assert "architecture      llama" in shown and "serving lane" not in shown


def test_errors_are_one_line(tmp_path: Path, model_file: Path) -> None:
    d = make_daemon(tmp_path)
    truncated = tmp_path / "cut.gguf"
    with model_file.open("rb") as f:
        truncated.write_bytes(f.read(model_file.stat().st_size - 5000))  # before the last tensor's start
    for args, needle in [
        (("show", "ghost"), "model 'ghost:latest' not found"),
        (("rm", "ghost"), "model 'ghost:latest' not found; nothing to remove (the catalog is empty)"),
        (("import", str(tmp_path / "nope.gguf")), "does not exist"),
        (("import", str(model_file), "--name", "bad name"), "invalid model name"),
        (
            ("import", str(model_file), "--name", ""),
            "invalid model name ''",
        ),  # not a name derived from the file
        (("import", str(truncated), "--name", "cut"), "is truncated: its last tensor starts at byte"),
        (("show", str(truncated)), "download or copy it again"),
        (("show", "x:thumbs_up:"), "'x:thumbs_up:'"),  # the name as typed: no emoji codes
    ]:
        r = d.cli(*args, check=False)
        assert r.returncode == 1, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, "prot = 1\n")
    r = d.cli("ls", check=False)
    assert r.returncode == 1 and "unknown key 'prot'" in r.stderr and "did you mean 'port'" in r.stderr


def test_directory_models_through_the_cli(tmp_path: Path) -> None:
    d = make_daemon(tmp_path)
    src = write_model_dir(tmp_path / "Qwen2.5-0.5B-Instruct-AWQ", "awq")
    out = d.cli("import", str(src)).stdout
    assert "imported qwen2.5-0.5b-instruct-awq:latest (0.0 MB, safetensors-quantized, AWQ)" in out
    d.cli("import", str(write_model_dir(tmp_path / "mlx", "mlx")), "--name", "tiny-mlx")
    d.cli("cp", "qwen2.5-0.5b-instruct-awq", "awq2")
    _header, *rows = d.cli("ls").stdout.splitlines()
    assert [r.split()[0] for r in rows] == [
        "awq2:latest",
        "qwen2.5-0.5b-instruct-awq:latest",
        "tiny-mlx:latest",
    ]
    assert rows[0].split()[1] == rows[1].split()[1] and rows[0].split()[-2:] == ["AWQ", "qwen2"]
    shown = d.cli("show", "awq2").stdout
    for needle in (
        "format            safetensors-quantized",
        "architecture      qwen2",
        "context length    32768",
        "quantization      AWQ",
        "chat template     yes",
        "serving lane      unavailable: model 'awq2:latest' is quantized safetensors (AWQ), which only the sglang",
    ):
        assert needle in shown, shown
    assert "an MLX model directory, which only the mlx lane serves" in d.cli("show", "tiny-mlx").stdout
    d.cli("rm", "qwen2.5-0.5b-instruct-awq")
    assert (d.data_dir / "models" / "awq2" / "latest" / "model.safetensors").is_file()
    d.cli("rm", "awq2")
    assert not (d.data_dir / "models" / "awq2").exists()

    notes = tmp_path / "notes"
    notes.mkdir()
    bad = d.cli("import", str(notes), check=False)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "expected a GGUF file, or a directory with config.json and *.safetensors weights" in bad.stderr
