from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _fixture_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test session builds fixtures into its own cache, never the user's."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("rtmatrix-cache")
    mp.setenv("RTMATRIX_CACHE_DIR", str(root))
    yield root
    mp.undo()


@pytest.fixture
def repo() -> Path:
    return REPO
