"""Settings the llama.cpp integration tests run with, on any host of this kind.

llama.cpp's extra buffer types (``use_extra_bufts``; weight repacking into the CPU backend's AMX
or CPU_REPACK layouts) are a host-specific kernel path: on some virtualized Xeons with AMX the
AMX buffer type crashes at the first decode (llama.cpp issue 20824; rtmatrix issue 24). Tests of
the harness must not depend on that path working, so they turn it off; the default setting is
checked on its own by ``test_the_default_setting_runs_or_its_crash_is_diagnosed``.
"""

from __future__ import annotations

#: the ``options`` line of a llama_cpp row in a test matrix
KNOWN_TO_WORK = "options = { extra_buffer_types = false }\n"
