"""A model's ``rpc_workers`` in config.toml: llama.cpp RPC workers its engine offloads to, validated with messages
that teach, and the ``--rpc`` its llama-server gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazar.config import load_config_text
from blazar.config.model import RpcWorker
from blazar.errors import ConfigError
from blazar.launch.settings import model_settings

PATH = Path("/etc/blazar/config.toml")


def test_workers_load_as_strings_or_tables() -> None:
    cfg = load_config_text(
        '[models."big:q4"]\nrpc_workers = ["10.0.0.7:50052", {address = "gpu-box:50053", memory_mib = 24000}]\n',
        PATH,
        {},
    )
    st = model_settings(cfg, "big:q4")
    assert st.rpc_workers == (RpcWorker("10.0.0.7", 50052), RpcWorker("gpu-box", 50053, 24000))
    assert [w.address for w in st.rpc_workers] == ["10.0.0.7:50052", "gpu-box:50053"]
    assert model_settings(cfg, "other").rpc_workers == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"10.0.0.7:50052"', "'models.\"big:q4\".rpc_workers' must be an array of \"host:port\" strings"),
        ('["10.0.0.7"]', 'rpc_workers[0]\' must be a "host:port" string'),
        ('["[::1]:50052"]', "IPv6 literals are not accepted by llama-server's --rpc"),
        ('["10.0.0.7:0"]', "with a port from 1 to 65535"),
        ('["10.0.0.7:http"]', "with a port from 1 to 65535"),
        ('[":50052"]', 'must be a "host:port" string'),
        ('["a b:50052"]', 'must be a "host:port" string'),
        ('["10.0.0.7:50052", "10.0.0.7:50052"]', "names 10.0.0.7:50052 twice"),
        ("[{memory_mib = 8}]", "'models.\"big:q4\".rpc_workers[0]' has no address"),
        ('[{address = "h:1", memory = 8}]', "unknown key 'models.\"big:q4\".rpc_workers[0].memory'"),
        ('[{address = "h:1", memory_mib = 0}]', "rpc_workers[0].memory_mib' must be an integer >= 1"),
        ("[1]", 'rpc_workers[0]\' must be a "host:port" string'),
        ("[" + ", ".join(f'"h:{p}"' for p in range(1, 18)) + "]", "names 17 workers; llama.cpp's RPC backend takes at most 16"),
    ],
)  # fmt: skip
def test_bad_workers_are_refused_with_the_rule(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config_text(f'[models."big:q4"]\nrpc_workers = {value}\n', PATH, {})
    assert message in str(exc.value)
