"""The OpenVINO GenAI row: the engine's own loop (``LLMPipeline``) on the fixture converted to
the stateful IR it loads (:mod:`.convert`); its messages are OpenVINO's
(:mod:`rtmatrix.runtimes.openvino.errors`)."""
