"""Shared fixtures of the Python package's tests.

The tests compare the package with the ``lucent`` command (``LUCENT_BIN``; default
``target/release/lucent``) and with the golden files in ``tests/data``. They are run by
``crates/lucent-cli/tests/python.rs`` (part of ``cargo test --release --workspace``),
which builds the wheel, installs it in a venv under ``target/`` and runs pytest.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def lucent_bin() -> str:
    exe = os.environ.get("LUCENT_BIN") or str(REPO / "target" / "release" / "lucent")
    if not Path(exe).is_file():
        raise RuntimeError(f"no lucent binary at {exe}: build it (cargo build --release) or set LUCENT_BIN")
    return exe


def run_cli(*args: str, stdin: str | None = None) -> str:
    """Run the lucent command; its stdout (raises with stderr on failure)."""
    p = subprocess.run(
        [lucent_bin(), *args], input=stdin, capture_output=True, text=True, encoding="utf-8"
    )
    if p.returncode != 0:
        raise AssertionError(f"lucent {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def run_cli_json(*args: str) -> dict:
    return json.loads(run_cli(*args))


def read_safetensors(path: Path) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """A safetensors file's f32 tensors and metadata (no dependency on safetensors)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n :]
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype="<f4").reshape(e["shape"])
    return out, meta


@pytest.fixture(scope="session")
def minilm():
    import lucent

    return lucent.SentenceTransformer("minilm")


@pytest.fixture(scope="session")
def sentences() -> List[str]:
    return [l for l in (REPO / "benches" / "sentences.txt").read_text().splitlines() if l.strip()]


@pytest.fixture(scope="session")
def smollm2():
    import lucent

    return lucent.Llama("smollm2", n_ctx=0)


@pytest.fixture(scope="session")
def tiny_run() -> Path:
    """A small GPT trained by ``lucent train lm`` (committed: tests/data/runs/tiny-char)."""
    return DATA / "runs" / "tiny-char"
