"""`blazar.catalog.modelfile`: Ollama Modelfile text read into /api/create's fields, and what it refuses."""

from __future__ import annotations

import pytest

from blazar.catalog import presets
from blazar.catalog.modelfile import ModelfileError, parse

DIGEST = "sha256:" + "ab" * 32


def test_every_instruction_with_its_quoting() -> None:
    text = '''
# a persona over smollm2
from smollm2
PARAMETER temperature 0.2
parameter num_ctx 4096
PARAMETER stop "<|im_end|>"
PARAMETER stop """User:"""
PARAMETER use_mmap true
SYSTEM """You are terse.
Answer in one line."""
MESSAGE user Hi there
MESSAGE assistant "Hello.\\nHow can I help?"
LICENSE MIT
LICENSE """Apache
2.0"""
'''
    assert parse(text) == {
        "from": "smollm2",
        "parameters": {
            "temperature": 0.2,
            "num_ctx": 4096,
            "stop": ["<|im_end|>", "User:"],
            "use_mmap": True,
        },
        "system": "You are terse.\nAnswer in one line.",
        "messages": [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello.\nHow can I help?"},
        ],
        "license": ["MIT", "Apache\n2.0"],
    }


def test_blobs_and_the_last_from_and_system_win() -> None:
    got = parse(
        f"FROM smollm2\nFROM @{DIGEST}\nADAPTER @{DIGEST}\nSYSTEM one\nSYSTEM two\nTEMPLATE {{{{ .Prompt }}}}"
    )
    assert got == {
        "files": {"model.gguf": DIGEST},
        "adapters": {"adapter.gguf": DIGEST},
        "system": "two",
        "template": "{{ .Prompt }}",
    }
    assert parse(f"FROM {DIGEST.replace(':', '-')}\nFROM smollm2") == {"from": "smollm2"}


def test_what_show_writes_is_read_back_to_the_same_preset() -> None:
    stored = {
        "system": 'Say "hi" and end with a quote"',
        "parameters": {"temperature": 0.5, "stop": ["\n", "END"], "num_predict": 12},
        "messages": [{"role": "user", "content": "a\tb"}, {"role": "assistant", "content": "\x01odd"}],
        "license": ["MIT"],
    }
    text = "\n".join(["FROM smollm2", *presets.modelfile_lines(stored)])
    got = parse(text)
    assert {k: got[k] for k in presets.FIELDS} == stored


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("SYSTEM hi", "no FROM line"),
        ("FROM ./model.gguf", "reads a file on the server"),
        ("FROM /models/x", "reads a file on the server"),
        ("FROM m\nADAPTER ./lora.gguf", "ADAPTER must name an uploaded blob"),
        ("FROM m\nPARAMETER temperature hot", "takes a number"),
        ("FROM m\nPARAMETER top_k 1.5", "takes a whole number"),
        ("FROM m\nPARAMETER use_mmap maybe", "takes true or false"),
        ("FROM m\nPARAMETER warp 9", "unknown parameter 'warp'"),
        ("FROM m\nPARAMETER temperature", "needs a name and a value"),
        ("FROM m\nMESSAGE narrator once", "MESSAGE takes a role"),
        ('FROM m\nSYSTEM """never closed\nstill', "never closed"),
        ('FROM m\nSYSTEM "open', "closing quote"),
        ("FROM m\nRUN rm -rf /", "unknown instruction 'RUN'"),
        (
            "FROM m\nPARAMETER temperature 1e400",
            "line 2: PARAMETER temperature takes a number",
        ),  # no inf in JSON
        ("FROM m\nPARAMETER temperature nan", "takes a number"),
    ],
)
def test_what_it_refuses_names_the_line(text: str, needle: str) -> None:
    with pytest.raises(ModelfileError, match=needle):
        parse(text)


def test_tabs_separate_as_spaces_do() -> None:
    """Ollama's parser takes a tab after an instruction or a parameter's name as it takes a space."""
    assert parse("FROM\tsmollm2\nPARAMETER\ttemperature\t0.2\nMESSAGE\tuser\thi") == {
        "from": "smollm2",
        "parameters": {"temperature": 0.2},
        "messages": [{"role": "user", "content": "hi"}],
    }
