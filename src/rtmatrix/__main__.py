from __future__ import annotations

from rtmatrix.cli import main

raise SystemExit(main())
