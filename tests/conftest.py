from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _fixture_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test session builds fixtures into its own cache, never the user's. The llama.cpp
    tools (llama-bench, llama-server: minutes to build) stay in the user's tools folder, which
    is keyed by version and build options, so a session reuses them and builds them once."""
    from rtmatrix.runtimes.llama_cpp.reftool import tools_root

    mp = pytest.MonkeyPatch()
    mp.setenv("RTMATRIX_TOOLS_DIR", str(tools_root()))
    root = tmp_path_factory.mktemp("rtmatrix-cache")
    mp.setenv("RTMATRIX_CACHE_DIR", str(root))
    yield root
    mp.undo()


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """Ctrl-C as a terminal delivers it: Python's KeyboardInterrupt handler in this process (a
    shell that starts pytest in the background sets SIGINT to ignored, and children inherit an
    ignored signal across exec), restored afterwards."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
